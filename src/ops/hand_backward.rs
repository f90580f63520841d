//! A part of the graph whose backward is driven by hand. Candle's backprop visits nodes
//! in an order of its own choosing and each op's gradient must be ready when its op is
//! visited; a schedule that starts a collective in one module's backward and takes its
//! result a module later (the ladder's backward) cannot be written as candle ops. So the
//! part is computed apart (on inputs cut from the graph) and joined back as one node:
//! [`join_hand_backward`] gives the part's output with the graph of its input and of the
//! parameters it reads, and candle calls the given `backward` with the output's gradient
//! when it reaches it. Each parameter's gradient returns to candle through a node of its
//! own ([`Carry`]), visited after the part's, so that a caller of `backward` (and
//! `backward_with`'s hook) sees it as any other.

use super::copy::contiguous_copy;
use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Result, Shape, Tensor, TensorId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Given the part's output gradient: its input gradient and its parameters' gradients.
pub type Backward = dyn Fn(&Tensor) -> Result<(Tensor, HashMap<TensorId, Tensor>)> + Send + Sync;

/// The parameters' gradients between the part's backward and their [`Carry`] nodes.
type Handed = Arc<Mutex<HashMap<TensorId, Tensor>>>;

/// `y`, computed apart from `x` and `params`, joined to them: its gradient goes to
/// `backward`, whose input gradient becomes `x`'s and whose parameter gradients become
/// `params`'s.
pub fn join_hand_backward(
    x: &Tensor,
    y: &Tensor,
    params: &[Tensor],
    backward: Arc<Backward>,
) -> Result<Tensor> {
    let handed: Handed = Arc::default();
    let carried = params
        .iter()
        .map(|p| {
            p.apply_op1(Carry {
                handed: handed.clone(),
                param: p.id(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let carrier = if carried.is_empty() {
        Tensor::zeros(1, y.dtype(), y.device())?
    } else {
        Tensor::cat(&carried, 0)?
    };
    x.apply_op2(
        &carrier,
        Join {
            y: y.detach(),
            backward,
            handed,
        },
    )
}

/// The part's output as a node over its input and its parameters' carrier.
struct Join {
    y: Tensor,
    backward: Arc<Backward>,
    handed: Handed,
}

impl CustomOp2 for Join {
    fn name(&self) -> &'static str {
        "hand-backward"
    }
    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (y, at) = self.y.storage_and_layout();
        match &*y {
            candle_core::Storage::Cpu(y) => contiguous_copy(y, at),
            _ => candle_core::bail!("hand-backward: the part's output is not on the CPU"),
        }
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (y, at) = self.y.storage_and_layout();
        match &*y {
            candle_core::Storage::Cuda(y) => contiguous_copy(y, at),
            _ => candle_core::bail!("hand-backward: the part's output is not on the GPU"),
        }
    }
    fn bwd(
        &self,
        _x: &Tensor,
        carrier: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (dx, params) = (self.backward)(grad_res)?;
        *self.handed.lock().unwrap_or_else(|p| p.into_inner()) = params;
        // The carrier's gradient means nothing; candle wants one for every node it visits.
        Ok((Some(dx), Some(carrier.zeros_like()?)))
    }
}

/// One element standing for a parameter in the carrier; its backward gives the
/// parameter the gradient the part's backward handed over.
struct Carry {
    handed: Handed,
    param: TensorId,
}

impl CustomOp1 for Carry {
    fn name(&self) -> &'static str {
        "carry-gradient"
    }
    fn cpu_fwd(&self, s: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        let shape = Shape::from(1);
        Ok((s.device().zeros_impl(&shape, s.dtype())?, shape))
    }
    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let shape = Shape::from(1);
        Ok((s.device().zeros_impl(&shape, s.dtype())?, shape))
    }
    fn bwd(&self, param: &Tensor, _res: &Tensor, _grad: &Tensor) -> Result<Option<Tensor>> {
        let handed = self
            .handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.param);
        Ok(Some(match handed {
            Some(g) => g,
            None => param.zeros_like()?,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// `y = tanh(x * w)` joined by hand gives `x` and `w` the gradients candle's own
    /// backprop gives them, bit for bit, and a caller's loss sees `y`'s values.
    #[test]
    fn a_part_joined_by_hand_gets_the_gradients_of_candles_backprop() {
        let dev = Device::Cpu;
        let x = Var::from_vec(vec![0.3f32, -1.2, 0.7, 2.0], 4, &dev).unwrap();
        let w = Var::from_vec(vec![1.5f32, 0.25, -0.5, 0.8], 4, &dev).unwrap();
        let c = Tensor::new(&[1.0f32, -2.0, 3.0, 0.5], &dev).unwrap();
        let direct = (x.as_tensor() * w.as_tensor()).unwrap().tanh().unwrap();
        let g = (&direct * &c)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();

        let x_in = Var::from_tensor(&x.as_tensor().detach()).unwrap();
        let part = (x_in.as_tensor() * w.as_tensor()).unwrap().tanh().unwrap();
        let (xi, wt, p) = (
            x_in.as_tensor().clone(),
            w.as_tensor().clone(),
            part.clone(),
        );
        let backward: Arc<Backward> = Arc::new(move |dy: &Tensor| {
            let store = p.backward_from(dy, |_, _| Ok(()))?;
            let params = HashMap::from([(wt.id(), store.get(&wt).unwrap().clone())]);
            Ok((store.get(&xi).unwrap().clone(), params))
        });
        let y =
            join_hand_backward(x.as_tensor(), &part, &[w.as_tensor().clone()], backward).unwrap();
        let h = (&y * &c).unwrap().sum_all().unwrap().backward().unwrap();
        let v = |t: &Tensor| t.to_vec1::<f32>().unwrap();
        assert_eq!(v(&y), v(&direct));
        for var in [&x, &w] {
            let (a, b) = (
                g.get(var.as_tensor()).unwrap(),
                h.get(var.as_tensor()).unwrap(),
            );
            assert_eq!(v(a), v(b));
        }
    }
}
