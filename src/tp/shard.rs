//! How a logical (unsharded) tensor maps onto a rank's shard, and back.

use anyhow::{bail, Result};
use candle_core::Tensor;

/// A split of a logical tensor over the `N` ranks of a TP group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shard {
    /// The last dimension (columns of an (in, out) weight, or a bias) is cut into `groups`
    /// equal parts and each part is split over ranks; rank r's pieces are concatenated.
    /// `groups = 3` keeps Q, K and V sharded separately inside a fused [Q | K | V].
    Columns { groups: usize },
    /// The first dimension (rows of an (in, out) weight) is split over ranks.
    Rows,
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

    /// The logical tensor from all ranks' shards, in rank order.
    pub fn gather(&self, shards: &[Tensor]) -> Result<Tensor> {
        let n = shards.len();
        match *self {
            Shard::Rows => Ok(Tensor::cat(shards, 0)?),
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
}
