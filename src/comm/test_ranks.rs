//! Thread ranks for the engine's unit tests: each member of an `n`-rank thread group with
//! a counted handle and its own tally (the tp modules' and blocks' tests), and the
//! facade's own wiring test.

use super::collectives::Comm;
use super::counted::CountedComm;
use super::tally::Tally;
use std::sync::Arc;

/// Runs `f` on each member of an `n`-rank thread group, each with a counted handle and
/// its own tally; results in rank order (the tp modules' unit tests).
pub(crate) fn on_thread_ranks<R: Send>(n: usize, f: impl Fn(CountedComm) -> R + Sync) -> Vec<R> {
    let comms = super::ThreadWorld::new().group(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let f = &f;
                s.spawn(move || {
                    f(CountedComm::new(
                        Arc::new(c) as Arc<dyn Comm>,
                        Arc::new(Tally::new()),
                    ))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::counted::{CountedComm, Reduce};
    use crate::comm::link::LinkModel;
    use crate::comm::tally::{CommKind, Site};
    use candle_core::Tensor;
    use std::time::Instant;

    /// The facade's wiring, with no sleep of its own: a started and a blocking sum give
    /// the group's sum, each recorded once with its bytes; on an emulated link of 2 ms a
    /// call, each is held to the link's time; a group of one records nothing.
    #[test]
    fn started_and_blocking_sums_are_summed_held_to_the_link_and_recorded_once() {
        let link = LinkModel::from_config(0.0, 2_000.0);
        let t = Tensor::ones(8, candle_core::DType::F32, &candle_core::Device::Cpu).unwrap();
        let got = on_thread_ranks(2, |c| {
            let c = c.with_link(link);
            let t0 = Instant::now();
            let a = c
                .start(&t, Reduce::Sum, Site::Layer(0), CommKind::TpForward)
                .unwrap();
            let a = a.wait().unwrap();
            let b = c.all_reduce(&t, Reduce::Mean, Site::Layer(1), CommKind::TpForward);
            let took = t0.elapsed().as_secs_f64();
            (
                a.to_vec1::<f32>().unwrap()[0],
                b.unwrap().to_vec1::<f32>().unwrap()[0],
                took,
                c.tally().snapshot(),
            )
        });
        for (sum, mean, took, snap) in got {
            assert_eq!((sum, mean), (2.0, 1.0));
            assert!(took >= 0.004, "two calls on a 2 ms link took {took} s");
            for layer in [0, 1] {
                let call = snap.at(Site::Layer(layer), CommKind::TpForward);
                assert_eq!((call.calls, call.bytes), (1, 32), "{call:?}");
            }
        }
        let solo = CountedComm::solo();
        let same = solo
            .all_reduce(&t, Reduce::Sum, Site::Layer(0), CommKind::TpForward)
            .unwrap();
        assert_eq!(same.to_vec1::<f32>().unwrap()[0], 1.0);
        assert_eq!(solo.tally().snapshot().total(CommKind::TpForward).calls, 0);
    }
}
