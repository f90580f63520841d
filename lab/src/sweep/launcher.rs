//! How a sweep starts each run: `threads` (one `tp-train` process, ranks as threads),
//! `{mpirun: N}` or `{mpirun: N, hostfile: FILE}` (N MPI processes, on the hosts a
//! hostfile lists), or `{srun: N}` (N Slurm tasks over PMIx, inside an allocation or as
//! one of their own). Anything else in a sweep file is one error naming it.

use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const FORMS: &str = "threads, {mpirun: N}, {mpirun: N, hostfile: FILE} or {srun: N}";

#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "Value")]
pub enum Launcher {
    /// Each run in its own `tp-train` process, ranks as threads.
    Threads,
    /// Each run under `mpirun -n N` (`--hostfile FILE` where given).
    Mpirun {
        ranks: usize,
        hostfile: Option<PathBuf>,
    },
    /// Each run under `srun -n N --mpi=pmix`.
    Srun { ranks: usize },
}

impl TryFrom<Value> for Launcher {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        let count = |v: &Value, key: &str| -> Result<usize, String> {
            v.as_u64()
                .filter(|n| *n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| {
                    format!("launcher {key} must be a number of ranks, e.g. {{{key}: 4}}")
                })
        };
        match &v {
            Value::String(s) if s == "threads" => Ok(Launcher::Threads),
            Value::Mapping(m) => {
                let key = |k: &Value| k.as_str().unwrap_or("?").to_string();
                if let Some(k) = m
                    .keys()
                    .map(key)
                    .find(|k| !["mpirun", "hostfile", "srun"].contains(&k.as_str()))
                {
                    return Err(format!("unknown launcher key `{k}`: use {FORMS}"));
                }
                match (m.get("mpirun"), m.get("srun"), m.get("hostfile")) {
                    (Some(n), None, hostfile) => Ok(Launcher::Mpirun {
                        ranks: count(n, "mpirun")?,
                        hostfile: match hostfile {
                            None => None,
                            Some(Value::String(f)) => Some(PathBuf::from(f)),
                            Some(_) => return Err("launcher hostfile must be a file name".into()),
                        },
                    }),
                    (None, Some(n), None) => Ok(Launcher::Srun { ranks: count(n, "srun")? }),
                    (None, Some(_), Some(_)) => Err(format!("a hostfile goes with mpirun, not srun (Slurm places the tasks): use {FORMS}")),
                    _ => Err(format!("launcher {} is not one of {FORMS}", serde_yaml_ng::to_string(&v).unwrap_or_default().trim())),
                }
            }
            other => Err(format!(
                "unknown launcher `{}`: use {FORMS}",
                serde_yaml_ng::to_string(other).unwrap_or_default().trim()
            )),
        }
    }
}

impl Launcher {
    /// Its ranks, where it sets them (threads take tp x dp from the run's config).
    pub fn ranks(&self) -> Option<usize> {
        match self {
            Launcher::Threads => None,
            Launcher::Mpirun { ranks, .. } | Launcher::Srun { ranks } => Some(*ranks),
        }
    }

    /// The command that starts `tp_train` this way (the run's own arguments follow).
    pub fn command(&self, tp_train: &Path) -> Command {
        match self {
            Launcher::Threads => {
                let mut c = Command::new(tp_train);
                c.args(["--backend", "threads"]);
                c
            }
            Launcher::Mpirun { ranks, hostfile } => {
                let mut c = Command::new("mpirun");
                c.args([
                    "-n",
                    &ranks.to_string(),
                    "--oversubscribe",
                    "--bind-to",
                    "none",
                ]);
                if let Some(f) = hostfile {
                    c.arg("--hostfile").arg(f);
                }
                c.arg(tp_train);
                // OpenMPI refuses root without its consent; a sweep as root should just work.
                c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                c
            }
            Launcher::Srun { ranks } => {
                let mut c = Command::new("srun");
                // Consecutive ranks (a TP group) on one node, as scripts/cluster/slurm.sbatch.
                c.args([
                    "-n",
                    &ranks.to_string(),
                    "--mpi=pmix",
                    "--distribution=block",
                ])
                .arg(tp_train);
                c
            }
        }
    }
}

impl Launcher {
    /// Fails with one line where the launcher cannot start a run here: its program not
    /// on the PATH, its hostfile missing (checked before anything runs: otherwise each
    /// point would fail with the launcher's own error, or with "cannot start tp-train").
    pub fn check_available(&self) -> anyhow::Result<()> {
        let on_path = |program: &str| {
            std::env::var_os("PATH").is_some_and(|paths| {
                std::env::split_paths(&paths).any(|d| d.join(program).is_file())
            })
        };
        match self {
            Launcher::Threads => Ok(()),
            Launcher::Srun { .. } if !on_path("srun") => Err(tp_harness::error::user(
                "launcher {srun: N}: srun is not on the PATH here: run the sweep on a Slurm machine (or inside an allocation), or use launcher: threads / {mpirun: N}",
            )),
            Launcher::Mpirun { .. } if !on_path("mpirun") => Err(tp_harness::error::user(
                "launcher {mpirun: N}: mpirun is not on the PATH here: install OpenMPI (scripts/setup.sh) or use launcher: threads",
            )),
            Launcher::Mpirun {
                hostfile: Some(h), ..
            } if !h.is_file() => Err(tp_harness::error::user(format!(
                "launcher hostfile {} does not exist (or is not a file): give the path of the file that lists the hosts",
                h.display()
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Launcher, String> {
        Launcher::try_from(serde_yaml_ng::from_str::<Value>(yaml).unwrap())
    }

    #[test]
    fn each_launcher_form_parses_and_every_other_key_is_refused_by_name() {
        assert_eq!(parse("threads"), Ok(Launcher::Threads));
        assert_eq!(
            parse("{mpirun: 4}"),
            Ok(Launcher::Mpirun {
                ranks: 4,
                hostfile: None
            })
        );
        assert_eq!(
            parse("{mpirun: 4, hostfile: hosts}"),
            Ok(Launcher::Mpirun {
                ranks: 4,
                hostfile: Some("hosts".into())
            })
        );
        assert_eq!(parse("{srun: 8}"), Ok(Launcher::Srun { ranks: 8 }));
        let e = parse("{mpirun: 4, hostfil: hosts}").unwrap_err();
        assert!(e.contains("unknown launcher key `hostfil`"), "{e}");
        assert!(parse("{srun: 2, hostfile: h}")
            .unwrap_err()
            .contains("goes with mpirun"));
        assert!(parse("{mpirun: 0}")
            .unwrap_err()
            .contains("number of ranks"));
        assert!(parse("slurm")
            .unwrap_err()
            .contains("unknown launcher `slurm`"));
    }

    #[test]
    fn a_launcher_that_cannot_start_here_is_one_line_before_anything_runs() {
        assert!(Launcher::Threads.check_available().is_ok());
        let e = Launcher::Mpirun {
            ranks: 2,
            hostfile: Some("/nonexistent/hosts".into()),
        }
        .check_available()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("/nonexistent/hosts does not exist")
                || e.contains("mpirun is not on the PATH"),
            "{e}"
        );
    }
}
