//! TensorBoard event files: scalars a running TensorBoard shows while the run trains
//! (`tensorboard: true`; `tensorboard --logdir RUN/tb`, or a sweep's folder to overlay its
//! runs). The format is TensorFlow's own: each record an `Event` protobuf (its messages
//! declared here with prost, field numbers from tensorflow/core/util/event.proto and
//! framework/summary.proto) framed as a TFRecord — length, masked CRC-32C of the length,
//! data, masked CRC-32C of the data. Tested by TensorBoard's own reader.

use anyhow::{Context, Result};
use prost::Message;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `tensorflow.Event`, the fields a scalar log uses.
#[derive(Clone, PartialEq, Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(oneof = "What", tags = "3, 5, 7")]
    what: Option<What>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum What {
    /// The first record of a file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
    /// Field 7 (6 is the deprecated `log_message`).
    #[prost(message, tag = "7")]
    SessionLog(SessionLog),
}

/// `tensorflow.SessionLog`: a START at a step tells TensorBoard's reader that the run
/// restarted there, and it drops what the run's files hold from that step on (the steps
/// a killed invocation logged after the checkpoint it resumes from).
#[derive(Clone, PartialEq, Message)]
struct SessionLog {
    /// `SessionStatus`: 1 is START.
    #[prost(int32, tag = "1")]
    status: i32,
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value` with its `simple_value`.
#[derive(Clone, PartialEq, Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    /// A member of the `value` oneof, so that it is written even when it is 0 (a plain
    /// proto3 float of 0 is left out, and TensorBoard then drops the value).
    #[prost(oneof = "Scalar", tags = "2")]
    value: Option<Scalar>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Scalar {
    #[prost(float, tag = "2")]
    SimpleValue(f32),
}

/// TFRecord's checksum: CRC-32C, rotated and offset so that a CRC of CRCs is not
/// mistaken for data.
fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One event file, appended to and flushed after every batch of scalars.
pub struct EventWriter {
    file: File,
    path: PathBuf,
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl EventWriter {
    /// A new event file in `dir` (created), named as TensorFlow names them
    /// (`events.out.tfevents.<seconds>.<host>`), opened with its version record.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let host = tp_harness::util::host::label()
            .split('/')
            .next()
            .unwrap_or("host")
            .to_string();
        let secs = now() as u64;
        // A second writer in the same second (a resumed run) gets a file of its own.
        let mut path = dir.join(format!("events.out.tfevents.{secs}.{host}"));
        let mut n = 1;
        while path.exists() {
            path = dir.join(format!("events.out.tfevents.{secs}.{host}.{n}"));
            n += 1;
        }
        let file =
            File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        let mut w = Self { file, path };
        w.record(&Event {
            wall_time: now(),
            step: 0,
            what: Some(What::FileVersion("brain.Event:2".into())),
        })?;
        w.flush()?;
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks a restart at `step` (a resume): TensorBoard drops the scalars of `step` and
    /// later that earlier files of the run hold, so each step shows once.
    pub fn restarted_at(&mut self, step: usize) -> Result<()> {
        self.record(&Event {
            wall_time: now(),
            step: step as i64,
            what: Some(What::SessionLog(SessionLog { status: 1 })),
        })?;
        self.flush()
    }

    fn record(&mut self, event: &Event) -> Result<()> {
        let data = event.encode_to_vec();
        let len = (data.len() as u64).to_le_bytes();
        let mut frame = Vec::with_capacity(data.len() + 16);
        frame.extend_from_slice(&len);
        frame.extend_from_slice(&masked_crc(&len).to_le_bytes());
        frame.extend_from_slice(&data);
        frame.extend_from_slice(&masked_crc(&data).to_le_bytes());
        self.file
            .write_all(&frame)
            .with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Scalars of one step, `(tag, value)`, as one event; flushed, so a running TensorBoard
    /// sees them.
    pub fn scalars(&mut self, step: usize, values: &[(String, f32)]) -> Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        self.record(&Event {
            wall_time: now(),
            step: step as i64,
            what: Some(What::Summary(Summary {
                value: values
                    .iter()
                    .map(|(tag, v)| SummaryValue {
                        tag: tag.clone(),
                        value: Some(Scalar::SimpleValue(*v)),
                    })
                    .collect(),
            })),
        })?;
        self.flush()
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .flush()
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // TensorFlow's formula written as TensorFlow writes it.
    #[allow(clippy::manual_rotate)]
    fn crc32c_and_its_mask_match_tensorflows_test_vectors() {
        // CRC-32C of 32 zero bytes (RFC 3720 B.4) and of "123456789".
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // tensorflow/core/lib/hash/crc32c.h: Mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
        let crc = crc32c::crc32c(b"123456789");
        assert_eq!(
            masked_crc(b"123456789"),
            ((crc >> 15) | (crc << 17)).wrapping_add(0xa282_ead8)
        );
    }

    #[test]
    fn every_record_is_framed_with_its_length_and_checksums() {
        let dir = std::env::temp_dir().join(format!("tp-tb-{}", std::process::id()));
        let mut w = EventWriter::create(&dir).unwrap();
        w.scalars(
            3,
            &[("loss/train".into(), 2.5), ("comm/hidden".into(), 0.0)],
        )
        .unwrap();
        let bytes = std::fs::read(w.path()).unwrap();
        let mut at = 0;
        let mut events = Vec::new();
        while at < bytes.len() {
            let len_bytes = &bytes[at..at + 8];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
            let crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
            assert_eq!(crc, masked_crc(len_bytes));
            let data = &bytes[at + 12..at + 12 + len];
            let crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
            assert_eq!(crc, masked_crc(data));
            events.push(Event::decode(data).unwrap());
            at += 16 + len;
        }
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].what,
            Some(What::FileVersion("brain.Event:2".into()))
        );
        let Some(What::Summary(s)) = &events[1].what else {
            panic!("{:?}", events[1]);
        };
        assert_eq!(events[1].step, 3);
        assert_eq!(s.value[0].tag, "loss/train");
        assert_eq!(s.value[0].value, Some(Scalar::SimpleValue(2.5)));
        // A zero is written, not left out as a default.
        assert_eq!(s.value[1].value, Some(Scalar::SimpleValue(0.0)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
