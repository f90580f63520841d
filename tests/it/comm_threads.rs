//! The threads backend: rank-order sums with identical bits on every member, the device
//! path equal to the host path, started all-reduces equal to blocking ones and in order,
//! aborts that release blocked members.

use candle_core::{DType, Tensor};
use std::sync::Arc;
use std::time::Duration;
use tp_harness::comm::{Comm, CommKind, CountedComm, Reduce, Site, Tally, ThreadWorld};

#[test]
fn all_reduce_sums_in_rank_order_and_every_member_gets_identical_bits() {
    let world = ThreadWorld::new();
    let comms = world.group(4);
    let handles: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for round in 0..50 {
                    let mut buf: Vec<f32> = (0..7)
                        .map(|i| (c.rank() as f32 + 1.0) * 0.1 + i as f32 * 1e-7 + round as f32)
                        .collect();
                    c.all_reduce_sum(&mut buf).unwrap();
                    out.push(buf);
                }
                out
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for r in &results[1..] {
        for (a, b) in r.iter().zip(&results[0]) {
            let a: Vec<u32> = a.iter().map(|x| x.to_bits()).collect();
            let b: Vec<u32> = b.iter().map(|x| x.to_bits()).collect();
            assert_eq!(a, b);
        }
    }
    let expect = ((0.1f32 + 0.2) + 0.3) + 0.4;
    assert_eq!(results[0][0][0], expect);
}

/// The device path computes the host path's sums, bit for bit (here on the CPU, where
/// both run; on a GPU the same candle adds run there).
#[test]
fn device_sums_equal_host_sums_bit_for_bit() {
    let world = ThreadWorld::new();
    let handles: Vec<_> = world
        .group(3)
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let v: Vec<f32> = (0..11)
                    .map(|i| ((c.rank() * 11 + i) as f32 * 0.37).sin() * 1e3)
                    .collect();
                let t = Tensor::from_vec(v.clone(), (11,), &candle_core::Device::Cpu).unwrap();
                let on_device = c.all_reduce_on_device(&t).unwrap();
                let mut host = v;
                c.all_reduce_sum(&mut host).unwrap();
                let t16 = t.to_dtype(DType::BF16).unwrap();
                let bf = c.all_reduce(&t16).unwrap();
                let mut widened = t16.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
                c.all_reduce_sum(&mut widened).unwrap();
                (on_device.to_vec1::<f32>().unwrap(), host, bf, widened)
            })
        })
        .collect();
    for h in handles {
        let (dev, host, bf, widened) = h.join().unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&dev), bits(&host));
        // bf16: widened, summed in f32 in rank order, rounded once.
        assert_eq!(bf.dtype(), DType::BF16);
        let rounded = Tensor::new(widened.as_slice(), &candle_core::Device::Cpu)
            .and_then(|w| w.to_dtype(DType::BF16))
            .and_then(|w| w.to_dtype(DType::F32))
            .and_then(|w| w.to_vec1::<f32>())
            .unwrap();
        let bf = bf.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(bits(&bf), bits(&rounded));
    }
}

/// Started all-reduces, several in flight at once and blocking ones issued between
/// them, give every member the blocking path's sums bit for bit, each to its own call.
#[test]
fn started_all_reduces_equal_blocking_ones_and_keep_their_order() {
    let run = |started: bool| {
        let handles: Vec<_> = ThreadWorld::new()
            .group(3)
            .into_iter()
            .map(|c| {
                std::thread::spawn(move || {
                    let c = CountedComm::new(Arc::new(c), Arc::new(Tally::new()));
                    let (site, kind) = (Site::Layer(0), CommKind::TpForward);
                    let vals = |k: usize| -> Vec<f32> {
                        (0..5)
                            .map(|i| ((c.rank() * 31 + k * 7 + i) as f32 * 0.37).sin())
                            .collect()
                    };
                    let tensor =
                        |k| Tensor::new(vals(k).as_slice(), &candle_core::Device::Cpu).unwrap();
                    let mut out = Vec::new();
                    for round in 0..4 {
                        let k = round * 3;
                        if started {
                            let a = c.start(&tensor(k), Reduce::Sum, site, kind).unwrap();
                            let b = c.start(&tensor(k + 1), Reduce::Sum, site, kind).unwrap();
                            // A blocking sum between two started ones.
                            let host = c.all_reduce(&tensor(k + 2), Reduce::Sum, site, kind);
                            let host: Vec<f32> = host.unwrap().to_vec1().unwrap();
                            out.push(a.wait().unwrap().to_vec1::<f32>().unwrap());
                            out.push(b.wait().unwrap().to_vec1::<f32>().unwrap());
                            out.push(host);
                        } else {
                            for j in 0..3 {
                                let sum = c.all_reduce(&tensor(k + j), Reduce::Sum, site, kind);
                                out.push(sum.unwrap().to_vec1().unwrap());
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    };
    let bits = |r: Vec<Vec<Vec<f32>>>| -> Vec<Vec<Vec<u32>>> {
        r.into_iter()
            .map(|m| {
                m.into_iter()
                    .map(|v| v.iter().map(|x| x.to_bits()).collect())
                    .collect()
            })
            .collect()
    };
    assert_eq!(bits(run(true)), bits(run(false)));
}

#[test]
fn abort_releases_members_blocked_in_a_collective() {
    let world = ThreadWorld::new();
    let mut comms = world.group(2);
    let c1 = comms.pop().unwrap();
    let waiter = std::thread::spawn(move || c1.all_reduce_sum(&mut [1.0]));
    std::thread::sleep(Duration::from_millis(50));
    world.abort("rank 0 failed: injected");
    let err = waiter.join().unwrap().unwrap_err().to_string();
    assert!(err.contains("rank 0 failed"), "{err}");
}
