//! Config keys as flags in nanoGPT's spelling: `--seed 3`, `--max_iters=300` (nanoGPT's
//! `train.py --key=value`), taken out of the command line before the binary's own flags
//! are parsed. A flag the binary defines itself (`--tp`, `--pattern`) stays its own.

use super::overrides::parse_assignment;
use super::overrides::Override;
use super::{Origin, RunConfig};
use anyhow::Result;

/// The keys whose values are yes or no.
fn bool_keys() -> Vec<String> {
    match serde_yaml_ng::to_value(RunConfig::default()) {
        Ok(serde_yaml_ng::Value::Mapping(m)) => m
            .into_iter()
            .filter(|(_, v)| v.is_bool())
            .filter_map(|(k, _)| k.as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    }
}

/// `args` (without the program name) split into the arguments left for the binary's own
/// parser and the config keys given as flags, in order, each with the flag as written.
/// `own` are the long flags the binary defines (without `--`).
pub fn take_key_flags(args: Vec<String>, own: &[String]) -> Result<(Vec<String>, Vec<Override>)> {
    let keys = RunConfig::known_keys();
    let bools = bool_keys();
    let mut rest = Vec::new();
    let mut taken = Vec::new();
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.next() {
        // Everything after `--` is positional, and `--set k=v` is the binary's own.
        if arg == "--" {
            rest.push(arg);
            rest.extend(it.by_ref());
            break;
        }
        let Some(flag) = arg.strip_prefix("--") else {
            rest.push(arg);
            continue;
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        };
        let key = name.replace('-', "_");
        if own.contains(&name) || !keys.contains(&key) {
            rest.push(arg);
            continue;
        }
        // A yes/no key given bare (`--tensorboard`) is yes.
        let bare = inline.is_none()
            && bools.contains(&key)
            && it.peek().is_none_or(|n| n.starts_with("--"));
        let value = match inline.or_else(|| if bare { Some("true".into()) } else { it.next() }) {
            Some(v) => v,
            None => tp_harness::user_bail!("--{name} needs a value, e.g. --{name}=VALUE"),
        };
        let (k, v) = parse_assignment(&format!("{key}={value}"))?;
        taken.push((k, v, Origin::Flag(format!("--{name} {value}"))));
    }
    Ok((rest, taken))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_yaml_ng::Value;

    fn split(args: &[&str]) -> (Vec<String>, Vec<(String, Value)>) {
        let own = vec!["tp".to_string(), "out".to_string(), "set".to_string()];
        let (rest, taken) =
            take_key_flags(args.iter().map(|s| s.to_string()).collect(), &own).unwrap();
        (rest, taken.into_iter().map(|(k, v, _)| (k, v)).collect())
    }

    #[test]
    fn nanogpt_spellings_become_config_keys_and_the_binarys_own_flags_stay() {
        let (rest, taken) = split(&[
            "--seed",
            "3",
            "--max_iters=300",
            "--tp",
            "2",
            "--learning-rate",
            "0.002",
            "--out",
            "run",
            "--set",
            "dropout=0.1",
            "--decay_lr=false",
        ]);
        assert_eq!(rest, ["--tp", "2", "--out", "run", "--set", "dropout=0.1"]);
        assert_eq!(
            taken,
            [
                ("seed".into(), Value::from(3)),
                ("max_iters".into(), Value::from(300)),
                ("learning_rate".into(), Value::from(0.002)),
                ("decay_lr".into(), Value::from(false)),
            ]
        );
        // A yes/no key alone is yes, also before another flag.
        assert_eq!(
            split(&["--tensorboard", "--tp", "2"]),
            (
                vec!["--tp".into(), "2".into()],
                vec![("tensorboard".into(), Value::from(true))]
            )
        );
        assert_eq!(
            split(&["--tensorboard", "false"]).1,
            [("tensorboard".into(), Value::from(false))]
        );
        // Not a key: left for the parser, whose error names it.
        assert_eq!(split(&["--sede", "3"]).0, ["--sede", "3"]);
        let e = take_key_flags(vec!["--seed".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--seed needs a value"), "{e}");
    }
}
