//! How a logical (unsharded) tensor maps onto a rank's shard, and back.

use anyhow::{bail, Result};
use candle_core::Tensor;

/// A split of a logical tensor over the `N` ranks of a TP group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shard {
    /// The last dimension (columns of an (in, out) weight, or a bias) is cut into `groups`
    /// equal parts and each part is split over ranks; rank r's pieces are concatenated.
    /// `groups = 3` keeps Q, K and V sharded separately inside a fused [Q | K | V].
    Columns { groups: usize },
    /// The first dimension (rows of an (in, out) weight) is split over ranks.
    Rows,
    /// The first dimension split as if padded to a multiple of `N`: rank r owns rows
    /// `[r*ceil(R/N), (r+1)*ceil(R/N))` of the padded tensor, cut at `R`. The padding
    /// rows are never stored (the last rank's shard is shorter), so a vocabulary of any
    /// size splits over any group whose ranks each get at least one row.
    PaddedRows,
}

/// The rows `[start, end)` rank `r` of `n` owns under [`Shard::PaddedRows`] of `rows` rows.
pub fn padded_rows_range(rows: usize, r: usize, n: usize) -> std::ops::Range<usize> {
    let per = rows.div_ceil(n);
    (r * per).min(rows)..((r + 1) * per).min(rows)
}

impl Shard {
    pub const COLUMNS: Shard = Shard::Columns { groups: 1 };

    /// Rank `r`'s shard of `full`.
    pub fn slice(&self, full: &Tensor, r: usize, n: usize) -> Result<Tensor> {
        match *self {
            Shard::Rows => {
                let rows = full.dim(0)?;
                if rows % n != 0 {
                    bail!("{rows} rows do not split over {n} ranks");
                }
                Ok(full.narrow(0, r * rows / n, rows / n)?.contiguous()?)
            }
            Shard::PaddedRows => {
                let range = padded_rows_range(full.dim(0)?, r, n);
                if range.is_empty() {
                    bail!(
                        "{} rows leave rank {r} of {n} none: use fewer ranks",
                        full.dim(0)?
                    );
                }
                Ok(full.narrow(0, range.start, range.len())?.contiguous()?)
            }
            Shard::Columns { groups } => {
                let last = full.rank() - 1;
                let cols = full.dim(last)?;
                if cols % (groups * n) != 0 {
                    bail!("{cols} columns do not split into {groups} group(s) over {n} ranks");
                }
                let part = cols / groups;
                let pieces = (0..groups)
                    .map(|g| full.narrow(last, g * part + r * part / n, part / n))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Ok(Tensor::cat(&pieces, last)?.contiguous()?)
            }
        }
    }

    /// A zero tensor of the logical shape holding rank `r`'s shard where [`Self::slice`]
    /// takes it from. Summing every rank's embedding gives the logical tensor.
    pub fn embed(
        &self,
        local: &Tensor,
        r: usize,
        n: usize,
        full_shape: &[usize],
    ) -> Result<Tensor> {
        let zeros = Tensor::zeros(full_shape, local.dtype(), local.device())?;
        let full_ranges =
            |dim: usize, range: std::ops::Range<usize>| -> Vec<std::ops::Range<usize>> {
                full_shape
                    .iter()
                    .enumerate()
                    .map(|(d, &len)| if d == dim { range.clone() } else { 0..len })
                    .collect()
            };
        match *self {
            Shard::Rows => {
                let rows = local.dim(0)?;
                Ok(zeros.slice_assign(&full_ranges(0, r * rows..(r + 1) * rows), local)?)
            }
            Shard::PaddedRows => {
                let range = padded_rows_range(full_shape[0], r, n);
                Ok(zeros.slice_assign(&full_ranges(0, range), local)?)
            }
            Shard::Columns { groups } => {
                let last = full_shape.len() - 1;
                let part = full_shape[last] / groups;
                let piece = part / n;
                let mut out = zeros;
                for g in 0..groups {
                    let start = g * part + r * piece;
                    let src = local.narrow(last, g * piece, piece)?.contiguous()?;
                    out = out.slice_assign(&full_ranges(last, start..start + piece), &src)?;
                }
                Ok(out)
            }
        }
    }

    /// The logical tensor from all ranks' shards, in rank order.
    pub fn gather(&self, shards: &[Tensor]) -> Result<Tensor> {
        let n = shards.len();
        match *self {
            Shard::Rows | Shard::PaddedRows => Ok(Tensor::cat(shards, 0)?),
            Shard::Columns { groups } => {
                let last = shards[0].rank() - 1;
                let local = shards[0].dim(last)?;
                let piece = local / groups;
                let mut ordered = Vec::with_capacity(groups * n);
                for g in 0..groups {
                    for s in shards {
                        ordered.push(s.narrow(last, g * piece, piece)?);
                    }
                }
                Ok(Tensor::cat(&ordered, last)?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn grouped_column_shards_take_each_group_separately_and_gather_back() {
        let full = Tensor::arange(0f32, 24., &Device::Cpu)
            .unwrap()
            .reshape((2, 12))
            .unwrap();
        let spec = Shard::Columns { groups: 3 };
        let s0 = spec.slice(&full, 0, 2).unwrap();
        // group width 4, half of each group: columns 0,1 | 4,5 | 8,9
        assert_eq!(
            s0.to_vec2::<f32>().unwrap()[0],
            vec![0., 1., 4., 5., 8., 9.]
        );
        let s1 = spec.slice(&full, 1, 2).unwrap();
        let back = spec.gather(&[s0, s1]).unwrap();
        assert_eq!(
            back.to_vec2::<f32>().unwrap(),
            full.to_vec2::<f32>().unwrap()
        );
    }

    #[test]
    fn embedded_shards_sum_to_the_full_tensor() {
        let full = Tensor::arange(0f32, 48., &Device::Cpu)
            .unwrap()
            .reshape((4, 12))
            .unwrap();
        for spec in [
            Shard::Rows,
            Shard::PaddedRows,
            Shard::Columns { groups: 3 },
            Shard::COLUMNS,
        ] {
            let mut sum = Tensor::zeros((4, 12), candle_core::DType::F32, &Device::Cpu).unwrap();
            for r in 0..2 {
                let local = spec.slice(&full, r, 2).unwrap();
                sum = (sum + spec.embed(&local, r, 2, &[4, 12]).unwrap()).unwrap();
            }
            assert_eq!(
                sum.to_vec2::<f32>().unwrap(),
                full.to_vec2::<f32>().unwrap(),
                "{spec:?}"
            );
        }
    }

    #[test]
    fn row_shards_gather_back_to_the_full_tensor() {
        let full = Tensor::arange(0f32, 32., &Device::Cpu)
            .unwrap()
            .reshape((8, 4))
            .unwrap();
        let shards: Vec<_> = (0..4)
            .map(|r| Shard::Rows.slice(&full, r, 4).unwrap())
            .collect();
        assert_eq!(shards[1].dims(), &[2, 4]);
        let back = Shard::Rows.gather(&shards).unwrap();
        assert_eq!(
            back.to_vec2::<f32>().unwrap(),
            full.to_vec2::<f32>().unwrap()
        );
    }

    /// 10 rows over 4 ranks: padded to 12, 3 rows each, the last rank's cut to 1; the
    /// shards still place and gather back to the whole.
    #[test]
    fn padded_row_shards_split_an_indivisible_count_and_gather_back() {
        let full = Tensor::arange(0f32, 20., &Device::Cpu)
            .unwrap()
            .reshape((10, 2))
            .unwrap();
        let shards: Vec<_> = (0..4)
            .map(|r| Shard::PaddedRows.slice(&full, r, 4).unwrap())
            .collect();
        let rows: Vec<usize> = shards.iter().map(|s| s.dim(0).unwrap()).collect();
        assert_eq!(rows, vec![3, 3, 3, 1]);
        assert_eq!(shards[3].to_vec2::<f32>().unwrap(), vec![vec![18., 19.]]);
        let back = Shard::PaddedRows.gather(&shards).unwrap();
        assert_eq!(
            back.to_vec2::<f32>().unwrap(),
            full.to_vec2::<f32>().unwrap()
        );
        let mut sum = Tensor::zeros((10, 2), candle_core::DType::F32, &Device::Cpu).unwrap();
        for (r, s) in shards.iter().enumerate() {
            sum = (sum + Shard::PaddedRows.embed(s, r, 4, &[10, 2]).unwrap()).unwrap();
        }
        assert_eq!(
            sum.to_vec2::<f32>().unwrap(),
            full.to_vec2::<f32>().unwrap()
        );
        // 3 rows over 4 ranks leave the last one nothing: an error, not an empty shard.
        let small = full.narrow(0, 0, 3).unwrap();
        assert!(Shard::PaddedRows.slice(&small, 3, 4).is_err());
    }
}
