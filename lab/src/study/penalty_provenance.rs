//! Where a study's settings were trained and for how long: per setting of the penalty
//! table, its runs, their hours of training and the machines they ran on (the context a
//! reader of its times needs, and what re-running it would take); per layout, how many
//! of its runs each machine made; and the pairs whose two runs computed with kernels of
//! different SIMD levels (AVX2 and AVX-512 round differently, so such a pair's
//! difference carries that too).

use super::penalty::{distinct, PenaltyRow};
use crate::analysis::table::Table;

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
    let mut per_run = Table::new(["setting", "pattern", "runs per machine"]);
    for r in rows {
        let made: Vec<String> = r
            .runs_by_machine
            .iter()
            .map(|(m, n)| format!("{n} on {}", m.as_deref().unwrap_or("not recorded")))
            .collect();
        per_run.row([
            r.setting_label.clone(),
            r.variant.to_string(),
            made.join("; "),
        ]);
    }
    let mut crossed = String::new();
    for r in rows {
        let Some(b) = &r.baseline else { continue };
        let base = rows
            .iter()
            .find(|x| x.setting == r.setting && &x.variant == b);
        let levels = distinct(
            r.machines
                .iter()
                .chain(base.map_or(&[][..], |x| &x.machines[..]))
                .flatten()
                .filter_map(|m| simd_level(m)),
        );
        if levels.len() > 1 {
            crossed += &format!(
                "- {}, {} against {}: runs computed with {} kernels\n",
                r.setting_label,
                r.variant,
                b,
                levels.join(" and ")
            );
        }
    }
    let crossed = match crossed.is_empty() {
        true => "\nEvery pair's two runs computed at one SIMD level.\n".to_string(),
        false => format!("\nPairs measured across SIMD levels (the kernels round differently, and at a high learning rate a final loss can move by a seed's worth: 0.0069 in one 4-layer run at 4e-3; such a pair's difference carries that too):\n\n{crossed}"),
    };
    format!(
        "\nWhere and how long (training: each run's steps x its median step time, evaluations left out):\n\n{}\nEach layout's runs by the machine that made them:\n\n{}{crossed}",
        t.markdown(),
        per_run.markdown()
    )
}

/// The SIMD level of a machine as summaries name it (`..., fused avx2 kernels`).
fn simd_level(machine: &str) -> Option<String> {
    let kernels = machine.rsplit(", ").next()?;
    let level = kernels.strip_prefix("fused ")?.strip_suffix(" kernels")?;
    Some(level.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;
    use crate::study::penalty::{penalty_rows, PenaltyRun, Setting};

    /// Three runs of a minute each, two recording their machine (the same) and one not.
    #[test]
    fn each_setting_names_its_runs_hours_and_machines() {
        let setting = Setting::of(&RunConfig::default()).unwrap();
        let run = |variant: &str, seed, machine: Option<&str>| PenaltyRun {
            setting: setting.clone(),
            variant: crate::config::Variant::parse(variant).unwrap(),
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
