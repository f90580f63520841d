//! Where a study's settings were trained and for how long: per setting of the penalty
//! table, its runs, their hours of training and the machines they ran on (the context a
//! reader of its times needs, and what re-running it would take).

use super::penalty::{distinct, PenaltyRow};
use super::table::Table;

/// Per setting: its runs, their hours of training and the machines they ran on.
pub fn markdown(rows: &[PenaltyRow]) -> String {
    let mut t = Table::new(["setting", "runs", "hours of training", "made on"]);
    let mut settings: Vec<&str> = Vec::new();
    for r in rows {
        if !settings.contains(&r.setting_label.as_str()) {
            settings.push(&r.setting_label);
        }
    }
    for label in settings {
        let of: Vec<&PenaltyRow> = rows.iter().filter(|r| r.setting_label == label).collect();
        let machines = distinct(of.iter().flat_map(|r| r.machines.clone()));
        // The machines named, then whether some runs did not record theirs.
        let made_on: Vec<String> = (machines.iter().flatten().cloned())
            .chain(machines.contains(&None).then(|| "not recorded".into()))
            .collect();
        t.row([
            label.to_string(),
            of.iter().map(|r| r.val.n).sum::<usize>().to_string(),
            format!(
                "{:.2}",
                of.iter().map(|r| r.train_seconds).sum::<f64>() / 3600.0
            ),
            made_on.join("; "),
        ]);
    }
    format!(
        "\nWhere and how long (training: each run's steps x its median step time, evaluations left out):\n\n{}",
        t.markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::penalty::{penalty_rows, PenaltyRun, Setting};
    use crate::config::RunConfig;

    /// Three runs of a minute each, two recording their machine (the same) and one not.
    #[test]
    fn each_setting_names_its_runs_hours_and_machines() {
        let setting = Setting::of(&RunConfig::default()).unwrap();
        let run = |variant: &str, seed, machine: Option<&str>| PenaltyRun {
            setting: setting.clone(),
            variant: crate::analysis::Variant::parse(variant).unwrap(),
            seed,
            final_val: 1.9,
            syncs: 1,
            exposed_syncs: 1,
            p_run: None,
            train_seconds: Some(60.0),
            machine: machine.map(String::from),
        };
        let rows = penalty_rows(
            &[
                run("tttt", 1, Some("cpu A")),
                run("pppp", 1, Some("cpu A")),
                run("pppp", 2, None),
            ],
            None,
        );
        let md = markdown(&rows);
        let line = format!("| {} | 3 | 0.05 | cpu A; not recorded |", setting.label());
        assert!(md.contains(&line), "{md}");
    }
}
