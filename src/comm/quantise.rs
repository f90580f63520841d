//! The quantiser `Q` of the compressed all-reduce (blocks.md, "Compressed all-reduce"):
//! the `comm_dtype` config key, and rows of f32 encoded to the bytes that travel and
//! decoded back (`deq(Q(x))`).
//!
//! A chunk of `rows` rows of `width` values travels as its payload (row after row, one
//! element after another, little-endian) followed, for `fp8` and `int8`, by one f32 scale
//! per row. `bf16` has the range of f32 and needs no scale.
//!
//! Rounding is to nearest, ties to even, everywhere, done on the bits (not through a
//! crate's scalar conversion, which would cost more than the link saves): the tests hold
//! these encoders to the `float8` crate and to candle's bf16 conversion.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The type TP activation and activation-gradient all-reduces travel in.
/// Named once: serde's name is strum's (`int8`), the list is strum's iterator.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CommDtype {
    /// Exact f32 sums (the plain all-reduce).
    #[default]
    F32,
    /// bfloat16, no scale.
    Bf16,
    /// E4M3 (max 448) with one f32 scale per row.
    Fp8,
    /// Symmetric int8 (max 127) with one f32 scale per row.
    Int8,
}

/// Largest magnitude of E4M3 (`S.1111.110`).
const FP8_MAX: f32 = 448.0;
const INT8_MAX: f32 = 127.0;

impl CommDtype {
    /// Every dtype, in declaration order.
    pub fn all() -> impl Iterator<Item = CommDtype> {
        <CommDtype as strum::IntoEnumIterator>::iter()
    }

    /// Its name in configs and tables (serde's).
    pub fn label(self) -> &'static str {
        self.into()
    }

    /// Bytes of one element on the wire.
    pub fn element_bytes(self) -> usize {
        match self {
            CommDtype::F32 => 4,
            CommDtype::Bf16 => 2,
            CommDtype::Fp8 | CommDtype::Int8 => 1,
        }
    }

    /// Whether each row carries an f32 scale.
    fn scaled(self) -> bool {
        matches!(self, CommDtype::Fp8 | CommDtype::Int8)
    }

    /// Bytes of `rows` rows of `width` values on the wire (payload and scales).
    pub fn encoded_len(self, rows: usize, width: usize) -> usize {
        rows * width * self.element_bytes() + if self.scaled() { rows * 4 } else { 0 }
    }
}

/// The scale of one row: `max|row| / max`, 1 for a row of zeros.
fn row_scale(row: &[f32], max: f32) -> f32 {
    let amax = row.iter().fold(0f32, |m, x| m.max(x.abs()));
    if amax == 0.0 {
        1.0
    } else {
        amax / max
    }
}

/// `v` rounded to the nearest integer, ties to even (exact for |v| < 2^22: adding and
/// removing 1.5 * 2^23 leaves no fraction bits, in the default rounding mode).
fn round_ties_even_small(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// f32 to bf16 bits, nearest-even (NaN stays NaN).
fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

fn bf16_value(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `v` (|v| <= 448) to its E4M3 byte, nearest-even.
fn fp8_byte(v: f32) -> u8 {
    let sign = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = v.abs();
    if a.is_nan() {
        return 0x7F;
    }
    // Below the smallest normal (2^-6) E4M3 counts in steps of 2^-9; the integer count
    // 0..=8 is the byte itself (8 is the smallest normal, exponent field 1).
    if a < 0.015625 {
        return sign | round_ties_even_small(a * 512.0) as u8;
    }
    // Round the f32 mantissa to 3 bits; a carry moves into the exponent as it should.
    let b = a.to_bits();
    let r = (b + 0x7FFFF + ((b >> 20) & 1)) & !0xFFFFF;
    let exponent = (r >> 23) as i32 - 127 + 7;
    sign | ((exponent as u8) << 3) | ((r >> 20) & 7) as u8
}

/// The value of an E4M3 byte.
fn fp8_value(byte: u8) -> f32 {
    let magnitude = byte & 0x7F;
    let e = i32::from(magnitude >> 3);
    let m = f32::from(magnitude & 7);
    let a = if magnitude == 0x7F {
        f32::NAN
    } else if e == 0 {
        m / 512.0
    } else {
        (1.0 + m / 8.0) * f32::powi(2.0, e - 7)
    };
    if byte & 0x80 != 0 {
        -a
    } else {
        a
    }
}

/// `Q(x)` of `rows` rows of `width` values (`x.len() == rows * width`), as bytes.
pub fn encode(x: &[f32], width: usize, dtype: CommDtype) -> Vec<u8> {
    let rows = x.len().checked_div(width).unwrap_or(0);
    let mut out = Vec::with_capacity(dtype.encoded_len(rows, width));
    match dtype {
        CommDtype::F32 => x.iter().for_each(|v| out.extend(v.to_le_bytes())),
        CommDtype::Bf16 => x
            .iter()
            .for_each(|&v| out.extend(bf16_bits(v).to_le_bytes())),
        CommDtype::Fp8 | CommDtype::Int8 => {
            let max = if dtype == CommDtype::Fp8 {
                FP8_MAX
            } else {
                INT8_MAX
            };
            let mut scales = Vec::with_capacity(rows);
            for row in x.chunks_exact(width.max(1)) {
                let scale = row_scale(row, max);
                scales.push(scale);
                for &v in row {
                    // Clamped: max|row| / scale can round to just above `max`.
                    let q = (v / scale).clamp(-max, max);
                    out.push(if dtype == CommDtype::Fp8 {
                        fp8_byte(q)
                    } else {
                        round_ties_even_small(q) as i8 as u8
                    });
                }
            }
            scales.iter().for_each(|s| out.extend(s.to_le_bytes()));
        }
    }
    out
}

/// `deq(bytes)`: the values [`encode`] made, into `out` (`rows * width` of them).
pub fn decode(bytes: &[u8], width: usize, dtype: CommDtype, out: &mut [f32]) -> Result<()> {
    let rows = out.len().checked_div(width).unwrap_or(0);
    if bytes.len() != dtype.encoded_len(rows, width) {
        bail!(
            "compressed all-reduce: {} bytes for {rows} rows of {width} {} values (expected {})",
            bytes.len(),
            dtype.label(),
            dtype.encoded_len(rows, width)
        );
    }
    match dtype {
        CommDtype::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        CommDtype::Bf16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16_value(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        CommDtype::Fp8 | CommDtype::Int8 => {
            let (payload, scales) = bytes.split_at(rows * width);
            let table: [f32; 256] = std::array::from_fn(|b| {
                if dtype == CommDtype::Fp8 {
                    fp8_value(b as u8)
                } else {
                    f32::from(b as u8 as i8)
                }
            });
            for ((orow, prow), s) in out
                .chunks_exact_mut(width.max(1))
                .zip(payload.chunks_exact(width.max(1)))
                .zip(scales.chunks_exact(4))
            {
                let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                for (o, &q) in orow.iter_mut().zip(prow) {
                    *o = table[q as usize] * scale;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use float8::F8E4M3;

    fn round_trip(x: &[f32], width: usize, dtype: CommDtype) -> Vec<f32> {
        let bytes = encode(x, width, dtype);
        assert_eq!(bytes.len(), dtype.encoded_len(x.len() / width, width));
        let mut out = vec![0f32; x.len()];
        decode(&bytes, width, dtype, &mut out).unwrap();
        out
    }

    /// Every E4M3 value, every midpoint between neighbours (the ties) and the f32s next
    /// to them, encoded as the `float8` crate encodes them, and every byte decoded as it
    /// decodes it.
    #[test]
    fn fp8_bytes_round_to_nearest_even_as_the_float8_crate_does() {
        for byte in 0u8..=255 {
            let v = F8E4M3::from_bits(byte).to_f32();
            if v.is_nan() {
                assert!(fp8_value(byte).is_nan());
                continue;
            }
            assert_eq!(fp8_value(byte).to_bits(), v.to_bits(), "byte {byte:#x}");
        }
        let finite: Vec<f32> = (0u8..0x7F).map(|b| F8E4M3::from_bits(b).to_f32()).collect();
        let mut probes = Vec::new();
        for w in finite.windows(2) {
            let mid = (w[0] + w[1]) / 2.0;
            for p in [w[0], mid, w[1]] {
                probes.extend([p, f32::from_bits(p.to_bits() + 1)]);
                if p > 0.0 {
                    probes.push(f32::from_bits(p.to_bits() - 1));
                }
            }
        }
        probes.extend((0..10_000).map(|i| i as f32 * 0.0447));
        for p in probes.into_iter().filter(|p| *p <= FP8_MAX) {
            for v in [p, -p] {
                assert_eq!(fp8_byte(v), F8E4M3::from_f32(v).to_bits(), "value {v:e}");
            }
        }
    }

    #[test]
    fn bf16_bits_round_to_nearest_even_as_candle_does() {
        let x: Vec<f32> = (0..20_000)
            .map(|i| {
                f32::from_bits(0x3F80_0000 + i * 0x2_1357) * if i % 2 == 0 { 1.0 } else { -1.0 }
            })
            .chain([
                1.0 + f32::EPSILON * 64.0,
                1.0 + f32::EPSILON * 192.0,
                0.0,
                -0.0,
                3e38,
            ])
            .collect();
        let ours = round_trip(&x, 1, CommDtype::Bf16);
        let candle = candle_core::Tensor::new(x.as_slice(), &candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(candle_core::DType::BF16))
            .and_then(|t| t.to_dtype(candle_core::DType::F32))
            .and_then(|t| t.to_vec1::<f32>())
            .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&ours), bits(&candle));
    }

    /// Per row: the largest magnitude lands on the type's maximum, ties go to even, a
    /// zero row keeps scale 1 and stays zero.
    #[test]
    fn int8_and_fp8_scale_each_row_by_its_largest_magnitude() {
        let x = [
            2.54f32, -1.27, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0, -4.0, 1.0, 0.5, 0.0,
        ];
        let i8 = encode(&x, 4, CommDtype::Int8);
        assert_eq!(&i8[..4], &[127u8, (-64i8) as u8, 0, 0]); // -63.5 -> -64, 0.5 -> 0
        assert_eq!(&i8[8..12], &[(-127i8) as u8, 32, 16, 0]); // 31.75 -> 32, 15.875 -> 16
        let scale = |k: usize| f32::from_le_bytes(i8[12 + 4 * k..16 + 4 * k].try_into().unwrap());
        assert_eq!(scale(0), 2.54 / 127.0);
        assert_eq!(scale(1), 1.0);
        assert_eq!(scale(2), 4.0 / 127.0);
        let y = round_trip(&x, 4, CommDtype::Int8);
        assert_eq!(y[0], 127.0 * (2.54f32 / 127.0));
        assert_eq!(&y[4..8], &[0.0; 4]);
        let f = round_trip(&x, 4, CommDtype::Fp8);
        assert_eq!(f[8], -4.0);
        assert_eq!(f[9], F8E4M3::from_f32(448.0 / 4.0).to_f32() * (4.0 / 448.0));
    }

    #[test]
    fn decode_refuses_bytes_of_the_wrong_length() {
        let bytes = encode(&[1.0, 2.0], 2, CommDtype::Int8);
        let err = decode(&bytes[1..], 2, CommDtype::Int8, &mut [0.0; 2]).unwrap_err();
        assert!(err.to_string().contains("expected 6"), "{err}");
    }
}
