//! The device mesh: `world = dp x tp` ranks with `rank = dp_rank * tp + tp_rank`, so the
//! members of a tensor-parallel group are consecutive ranks (one node), as in Megatron-LM.
//!
//! Worked example, world 8, tp 2, dp 4:
//! TP groups `[0,1] [2,3] [4,5] [6,7]`; DP groups `[0,2,4,6] [1,3,5,7]`.

use anyhow::{bail, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mesh {
    pub tp: usize,
    pub dp: usize,
    pub rank: usize,
}

impl Mesh {
    pub fn new(tp: usize, dp: usize, rank: usize) -> Result<Self> {
        if tp == 0 || dp == 0 {
            bail!("tp and dp must be at least 1 (got tp {tp}, dp {dp})");
        }
        if rank >= tp * dp {
            bail!("rank {rank} is outside a world of {} ranks", tp * dp);
        }
        Ok(Self { tp, dp, rank })
    }

    /// The mesh for a world of `world` ranks at tensor-parallel size `tp`.
    pub fn from_world(world: usize, tp: usize, rank: usize) -> Result<Self> {
        if tp == 0 || !world.is_multiple_of(tp) {
            bail!("a world of {world} ranks does not divide into tensor-parallel groups of {tp}: launch a multiple of {tp} ranks or change tp");
        }
        Self::new(tp, world / tp, rank)
    }

    pub fn world(&self) -> usize {
        self.tp * self.dp
    }
    pub fn tp_rank(&self) -> usize {
        self.rank % self.tp
    }
    pub fn dp_rank(&self) -> usize {
        self.rank / self.tp
    }
    /// Global ranks of the tensor-parallel group that holds data-parallel index `dp_rank`.
    pub fn tp_group(&self, dp_rank: usize) -> Vec<usize> {
        (0..self.tp).map(|t| dp_rank * self.tp + t).collect()
    }
    /// Global ranks of the data-parallel group that holds tensor-parallel index `tp_rank`.
    pub fn dp_group(&self, tp_rank: usize) -> Vec<usize> {
        (0..self.dp).map(|d| d * self.tp + tp_rank).collect()
    }
    pub fn my_tp_group(&self) -> Vec<usize> {
        self.tp_group(self.dp_rank())
    }
    pub fn my_dp_group(&self) -> Vec<usize> {
        self.dp_group(self.tp_rank())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_rank_example_groups_match_the_megatron_layout() {
        let m = Mesh::new(2, 4, 0).unwrap();
        let tp: Vec<_> = (0..4).map(|d| m.tp_group(d)).collect();
        let dp: Vec<_> = (0..2).map(|t| m.dp_group(t)).collect();
        assert_eq!(tp, vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]);
        assert_eq!(dp, vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
        let m5 = Mesh::new(2, 4, 5).unwrap();
        assert_eq!((m5.dp_rank(), m5.tp_rank()), (2, 1));
        assert_eq!(m5.my_tp_group(), vec![4, 5]);
        assert_eq!(m5.my_dp_group(), vec![1, 3, 5, 7]);
    }

    #[test]
    fn every_rank_is_in_exactly_one_tp_and_one_dp_group_for_each_shape() {
        for (tp, dp) in [(1, 1), (1, 4), (4, 1), (2, 2), (2, 3), (3, 2)] {
            for rank in 0..tp * dp {
                let m = Mesh::new(tp, dp, rank).unwrap();
                assert!(m.my_tp_group().contains(&rank));
                assert!(m.my_dp_group().contains(&rank));
                assert_eq!(m.my_tp_group().len(), tp);
                assert_eq!(m.my_dp_group().len(), dp);
            }
        }
    }

    #[test]
    fn world_that_does_not_divide_by_tp_is_an_error_naming_both() {
        let e = Mesh::from_world(3, 2, 0).unwrap_err().to_string();
        assert!(e.contains("3 ranks") && e.contains("groups of 2"), "{e}");
    }
}
