//! The GPU test set: the CPU suite's equivalence proofs rerun on CUDA, the GPU kernels
//! against the portable path, and the GPU collectives. Built by `scripts/build-cuda.sh`
//! (feature `cuda`), run on the GPU machine by `scripts/cuda/gpu-check.sh`; CI has no GPU and
//! never builds it.
//!
//! Tolerances, f32 (TF32 off): loss 1e-5 relative and every gradient 1e-4 relative (L2
//! per tensor), as on the CPU; bf16 passes: loss 1e-2 and gradients 5e-2 against the f32
//! reference, as the CPU's bf16 tests. Kernels against the portable path on the same GPU:
//! 1e-5 (f32) and 2e-2 (bf16) relative.
#![cfg(feature = "cuda")]

#[path = "it/common/mod.rs"]
mod common;
use candle_core::{DType, Device, Tensor};
use common::checks::{self, check_golden_cases, On};
use std::sync::{Arc, OnceLock};
use tp_harness::comm::nccl::NcclComm;
use tp_harness::comm::{compressed, Comm, ThreadWorld};
use tp_harness::device::{ComputeDtype, DeviceKind, Kernels};

/// One candle device for the whole test binary (thread ranks share it, as the launcher
/// does), with TF32 off so that f32 matmuls are f32.
fn gpu() -> Device {
    static GPU: OnceLock<Device> = OnceLock::new();
    GPU.get_or_init(|| {
        candle_core::cuda_backend::set_gemm_reduced_precision_f32(false);
        DeviceKind::Cuda.open(0).expect("a GPU")
    })
    .clone()
}

fn on_gpu(kernels: Kernels, dtype: ComputeDtype) -> On {
    let cpu = On::cpu(kernels);
    let (loss_tol, grad_tol) = match dtype {
        ComputeDtype::F32 => (cpu.loss_tol, cpu.grad_tol),
        ComputeDtype::Bf16 => (1e-2, 5e-2),
    };
    On {
        device: gpu(),
        dtype,
        loss_tol,
        grad_tol,
        ..cpu
    }
}

const BOTH: [Kernels; 2] = [Kernels::Fused, Kernels::Portable];

#[path = "gpu/kernels.rs"]
mod kernels;

#[test]
fn gpu_t_only_model_matches_dense_gpt2_at_tp1_2_and_4() {
    for k in BOTH {
        for tp in [1, 2, 4] {
            for bias in [true, false] {
                checks::check_against_dense("tttt", tp, bias, &on_gpu(k, ComputeDtype::F32));
            }
        }
    }
}

#[test]
fn gpu_s_and_p_match_literal_blocks_md() {
    for k in BOTH {
        for pattern in ["tpst", "sppp", "pspp", "ssss", "pppp"] {
            for tp in [2, 4] {
                for bias in [true, false] {
                    checks::check_against_literal(pattern, tp, bias, &on_gpu(k, ComputeDtype::F32));
                }
            }
        }
    }
}

#[test]
fn gpu_every_golden_case_matches_loss_and_all_gradients() {
    let ons = [
        on_gpu(Kernels::Fused, ComputeDtype::F32),
        on_gpu(Kernels::Portable, ComputeDtype::F32),
    ];
    assert!(check_golden_cases(&checks::golden_dir(), &ons) >= 1);
    // Copied next to the GPU bundle by build-cuda.sh where the shared folder has it.
    let ladder = checks::golden_ladder_dir();
    if ladder.is_dir() {
        assert!(check_golden_cases(&ladder, &ons) >= 2);
    }
}

#[test]
fn gpu_bf16_passes_stay_within_bf16_rounding_of_the_f32_references() {
    for k in BOTH {
        let on = on_gpu(k, ComputeDtype::Bf16);
        for tp in [1, 2, 4] {
            checks::check_against_dense("tttt", tp, true, &on);
        }
        checks::check_against_literal("sppp", 2, true, &on);
    }
}

/// Thread ranks sharing the GPU sum device tensors in rank order: the same bits as the
/// CPU's host sums.
#[test]
fn gpu_thread_ranks_sum_device_memory_in_rank_order_like_the_cpu() {
    let world = ThreadWorld::new();
    let handles: Vec<_> = world
        .group(4)
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let v: Vec<f32> = (0..1000)
                    .map(|i| ((c.rank() * 1000 + i) as f32 * 0.013).sin() * 7.0)
                    .collect();
                let t = Tensor::from_vec(v.clone(), 1000, &gpu()).unwrap();
                let on_gpu = c.all_reduce(&t).unwrap();
                assert!(on_gpu.device().is_cuda());
                let mut host = v;
                c.all_reduce_sum(&mut host).unwrap();
                (on_gpu.to_vec1::<f32>().unwrap(), host)
            })
        })
        .collect();
    for h in handles {
        let (dev, host) = h.join().unwrap();
        assert_eq!(
            dev.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            host.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// NCCL at world size 1 on the device: tensors (f32, bf16) and host buffers come back
/// unchanged, on the GPU, through NCCL's own path.
#[test]
fn gpu_nccl_group_of_one_reduces_through_nccl() {
    let comm: Arc<dyn Comm> = Arc::new(NcclComm::solo(&gpu()).expect("NCCL on the GPU"));
    let x = Tensor::arange(0f32, 4096.0, &gpu())
        .unwrap()
        .reshape((64, 64))
        .unwrap();
    let y = comm.all_reduce(&x).unwrap();
    assert!(y.device().is_cuda());
    assert_eq!(y.dims(), &[64, 64]);
    assert_eq!(
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        x.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    let x16 = x.to_dtype(DType::BF16).unwrap();
    let y16 = comm.all_reduce(&x16).unwrap();
    assert_eq!(y16.dtype(), DType::BF16);
    let mut buf = vec![1.5f32, -2.0, 3.25];
    comm.all_reduce_sum(&mut buf).unwrap();
    assert_eq!(buf, vec![1.5, -2.0, 3.25]);
    // A narrowed (offset) view is reduced from its own elements only.
    let part = x.narrow(0, 10, 3).unwrap();
    let y = comm.all_reduce(&part).unwrap();
    assert_eq!(
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        part.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    // Started on the communication stream, kernels queued meanwhile, waited for: the
    // same values; an input dropped before the wait stays alive for NCCL.
    let started = comm
        .start_on_device(&(&x * 2.0).unwrap())
        .expect("NCCL queues on its stream")
        .unwrap();
    let meanwhile = (x.matmul(&x).unwrap() * 0.5).unwrap();
    let y = started.wait().unwrap();
    assert_eq!(
        y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        (&x * 2.0)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    );
    assert_eq!(meanwhile.dims(), &[64, 64]);
    // The compressed all-reduce's exchange through the GPU: at one rank, deq(Q(x)).
    let int8 = tp_harness::comm::CommDtype::Int8;
    let q = compressed::all_reduce_tensor(&*comm, &x, int8).unwrap();
    let cpu_x = x.to_device(&Device::Cpu).unwrap();
    let host = compressed::all_reduce_tensor(&*comm, &cpu_x, int8).unwrap();
    assert_eq!(
        q.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        host.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
}

/// The device every rank thread shares has one explicit stream (not CUDA's legacy or
/// per-thread default stream, on which each thread's kernels would run unordered against
/// the others'), its clones share it, cudarc's event tracking is off and the memory pool
/// keeps what is freed — the defaults `open_cuda` sets (src/device.rs).
#[test]
fn gpu_device_is_one_explicit_stream_shared_by_its_clones_with_the_pool_kept() {
    let d = gpu();
    let (explicit, tracking, threshold) = tp_harness::device::cuda_setup(&d).unwrap();
    assert!(
        explicit,
        "open_cuda gave a default (legacy or per-thread) stream"
    );
    assert!(!tracking, "event tracking is on");
    assert_eq!(threshold, u64::MAX, "the pool hands freed memory back");
    let other_thread = std::thread::spawn(move || {
        let c = d.clone();
        c.as_cuda_device().unwrap().cuda_stream().cu_stream() as usize
    })
    .join()
    .unwrap();
    let here = gpu().as_cuda_device().unwrap().cuda_stream().cu_stream() as usize;
    assert_eq!(
        here, other_thread,
        "a clone on another thread has another stream"
    );
}
