//! The conjugate operators of Megatron-LM, as candle autograd ops.
//!
//! - `copy_to_tp` (f): forward copy, backward all-reduce.
//! - `reduce_from_tp` (g): forward all-reduce, backward copy.
//!
//! The ladder block (`blocks/kinds/ladder.rs`) starts both collectives and waits for them a module
//! later, forward and backward; it drives its own backward and calls the group directly.
//!
//! They stay visible at the call site (the blocks) instead of hiding inside the linears:
//! in `s` and `p` the MLP input is rank-local, where a built-in `f` would be wrong.
//! A group of one returns its input untouched, with no node in the graph ([`apply`]).
//!
//! Their sums are [`Reduce::Activation`]s of the group, sent compressed when its
//! `comm_dtype` says (straight-through: the backward of a quantised g is the identity,
//! as of an exact one).

use crate::comm::{CommKind, CountedComm, Reduce, Site};
use crate::ops::copy::contiguous_copy;
use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Storage, Tensor};

/// A collective's error inside candle's autograd.
pub fn into_candle(e: anyhow::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("{e:#}"))
}

/// `op` applied to `x`, or `x` itself in a group of one (which communicates nothing).
fn apply(
    x: &Tensor,
    group: &CountedComm,
    op: impl CustomOp1 + Send + Sync + 'static,
) -> Result<Tensor> {
    if !group.communicates() {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(op)
}

/// `cpu_fwd` (and `cuda_fwd`) of an op whose forward is the identity.
macro_rules! identity_forward {
    () => {
        fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
            contiguous_copy(storage, layout)
        }
        #[cfg(feature = "cuda")]
        fn cuda_fwd(
            &self,
            storage: &candle_core::CudaStorage,
            layout: &Layout,
        ) -> Result<(candle_core::CudaStorage, Shape)> {
            contiguous_copy(storage, layout)
        }
    };
}

struct CopyToTp {
    group: CountedComm,
    site: Site,
}

impl CustomOp1 for CopyToTp {
    fn name(&self) -> &'static str {
        "copy-to-tp"
    }
    identity_forward!();
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let grad = grad_res.contiguous()?;
        let sum = self
            .group
            .all_reduce(&grad, Reduce::Activation, self.site, CommKind::TpBackward);
        sum.map(Some).map_err(into_candle)
    }
}

/// f: forward identity, backward all-reduce of the input gradient over the TP group.
pub fn copy_to_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    let op = CopyToTp {
        group: group.clone(),
        site,
    };
    apply(x, group, op)
}

/// g: forward all-reduce over the TP group, backward identity.
pub fn reduce_from_tp(x: &Tensor, group: &CountedComm, site: Site) -> Result<Tensor> {
    let x = x.contiguous()?;
    let kind = CommKind::TpForward;
    let sum = group.all_reduce(&x.detach(), Reduce::Activation, site, kind);
    apply(&x, group, TakeSum(sum.map_err(into_candle)?))
}

/// An op whose forward is a sum computed already and whose backward is the identity:
/// g's value and gradient, split from its communication.
struct TakeSum(Tensor);

impl CustomOp1 for TakeSum {
    fn name(&self) -> &'static str {
        "take-sum"
    }
    fn cpu_fwd(&self, _storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let (sum, at) = self.0.storage_and_layout();
        match &*sum {
            Storage::Cpu(sum) if at.shape() == layout.shape() => contiguous_copy(sum, at),
            _ => candle_core::bail!(
                "take-sum: the sum is not of {:?} on the CPU",
                layout.shape()
            ),
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _storage: &candle_core::CudaStorage,
        layout: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (sum, at) = self.0.storage_and_layout();
        match &*sum {
            Storage::Cuda(sum) if at.shape() == layout.shape() => contiguous_copy(sum, at),
            _ => candle_core::bail!(
                "take-sum: the sum is not of {:?} on the GPU",
                layout.shape()
            ),
        }
    }
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad_res.clone()))
    }
}

/// Which end of a span of layers a trace mark sits at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkAt {
    /// Its input: the mark's backward runs when the layers' backward is done.
    Input,
    /// Its output: the mark's backward runs when their backward begins.
    Output,
}

/// An op whose forward is the identity and whose backward notes, on the rank's trace,
/// where a span of layers' backward begins or ends: candle's backprop has no hooks, so
/// the marks are nodes of the graph (made only on traced steps).
struct TraceMark {
    tally: std::sync::Arc<crate::comm::Tally>,
    key: String,
    at: MarkAt,
}

impl CustomOp1 for TraceMark {
    fn name(&self) -> &'static str {
        "trace-mark"
    }
    identity_forward!();
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let trace = self.tally.trace();
        match self.at {
            MarkAt::Output => trace.begin(&self.key),
            MarkAt::Input => trace.end(&self.key, "layer", format!("{} backward", self.key)),
        }
        Ok(Some(grad_res.clone()))
    }
}

/// `x` marked for the trace as the input or output of the layers `key` names (`x` itself
/// when the rank is not tracing).
pub fn trace_mark(x: &Tensor, group: &CountedComm, key: &str, at: MarkAt) -> Result<Tensor> {
    if !group.tally().trace().is_on() {
        return Ok(x.clone());
    }
    x.apply_op1(TraceMark {
        tally: group.tally().clone(),
        key: key.to_string(),
        at,
    })
}

struct ScaleGrad(f64);

impl CustomOp1 for ScaleGrad {
    fn name(&self) -> &'static str {
        "scale-grad"
    }
    identity_forward!();
    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some((grad_res * self.0)?))
    }
}

/// Forward identity, backward multiplies the gradient by `1/n`.
///
/// For a replicated parameter whose gradient is partial per rank (summed over the TP group
/// once per step) but which is *also* used on a replicated value: every rank holds that
/// use's whole contribution, so each contributes `1/n` of it and the group sum counts it
/// exactly once. The forward value is untouched (unlike adding `b/n` inside the sum).
pub fn share_grad_over_tp(x: &Tensor, n: usize) -> Result<Tensor> {
    if n == 1 {
        return Ok(x.clone());
    }
    x.contiguous()?.apply_op1(ScaleGrad(1.0 / n as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device, Var};

    fn on_two_ranks<R: Send>(f: impl Fn(CountedComm) -> R + Sync) -> Vec<R> {
        crate::comm::test_ranks::on_thread_ranks(2, f)
    }

    fn site() -> Site {
        Site::Layer(0)
    }

    /// g's value is the group's sum in rank order and its gradient the identity.
    #[test]
    fn g_sums_forward_and_passes_the_gradient_back() {
        let value = |rank: usize, i: usize| ((rank * 12 + i) as f32 * 0.91).cos() * 3.0;
        let out = on_two_ranks(|g| {
            let vals: Vec<f32> = (0..12).map(|i| value(g.rank(), i)).collect();
            let x = Var::from_vec(vals, (3, 4), &Device::Cpu).unwrap();
            let y = reduce_from_tp(x.as_tensor(), &g, site()).unwrap();
            let w = Tensor::arange(0f32, 12.0, &Device::Cpu)
                .unwrap()
                .reshape((3, 4))
                .unwrap();
            let grads = (y.clone() * w)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let gx = grads.get(x.as_tensor()).unwrap().flatten_all().unwrap();
            (
                y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                gx.to_vec1::<f32>().unwrap(),
            )
        });
        let sum: Vec<f32> = (0..12).map(|i| value(0, i) + value(1, i)).collect();
        for (y, gx) in out {
            assert_eq!(y, sum);
            assert_eq!(gx, (0..12).map(|i| i as f32).collect::<Vec<_>>());
        }
    }

    /// f and g accept bf16 activations: f's backward and g's forward sum over the group.
    #[test]
    fn f_and_g_carry_bf16_activations() {
        let out = on_two_ranks(|g| {
            let x = Var::from_vec(vec![1.0f32 + g.rank() as f32; 4], 4, &Device::Cpu).unwrap();
            let x16 = x.as_tensor().to_dtype(DType::BF16).unwrap();
            let y = reduce_from_tp(&copy_to_tp(&x16, &g, site()).unwrap(), &g, site()).unwrap();
            assert_eq!(y.dtype(), DType::BF16);
            let grads = y
                .to_dtype(DType::F32)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let gx = grads.get(x.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            (
                y.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(),
                gx,
            )
        });
        for (y, gx) in out {
            assert_eq!(y, vec![3.0; 4]);
            assert_eq!(gx, vec![2.0; 4]);
        }
    }
}
