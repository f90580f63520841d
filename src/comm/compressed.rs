//! The two-step quantised all-reduce of blocks.md ("Compressed all-reduce"), written once
//! over any backend's byte exchange:
//!
//! ```text
//! s_c  = sum_r deq(Q(x_r[c]))    reduce-scatter: rank c receives chunk c of every rank
//!                                (encoded) and sums the decoded chunks in rank order, f32
//! y[c] = deq(Q(s_c))             all-gather of the re-encoded chunk sums
//! ```
//!
//! Rows (the tensor's last dimension is a row) are split into one contiguous chunk per
//! rank, as evenly as possible, the first chunks one row longer. Every rank decodes the
//! same bytes, so every rank ends with identical bits; each sends `2 (N-1)/N` of the
//! encoded tensor. The rank's own chunk never leaves it but is encoded all the same: the
//! formula quantises every rank's term.

use super::collectives::{stage_through_host, Comm};
use super::quantise::{decode, encode, CommDtype};
use anyhow::{bail, Result};
use candle_core::Tensor;
use std::ops::Range;

/// `len` items split into `n` contiguous ranges in order, as evenly as possible (the
/// first `len % n` one longer).
pub fn even_chunks(len: usize, n: usize) -> Vec<Range<usize>> {
    let mut start = 0;
    (0..n)
        .map(|j| {
            let size = len / n + usize::from(j < len % n);
            start += size;
            start - size..start
        })
        .collect()
}

/// The compressed sum of a tensor's rows (its last dimension) over `member`'s group,
/// staged through host memory.
pub fn all_reduce_tensor(member: &dyn Comm, t: &Tensor, dtype: CommDtype) -> Result<Tensor> {
    let width = t.dims().last().copied().unwrap_or(1);
    stage_through_host(t, |buf| all_reduce(member, buf, width, dtype))
}

/// The compressed sum of the rank partials in `buf` (rows of `width`), in place, over
/// `member`'s byte exchange.
pub fn all_reduce(
    member: &dyn Comm,
    buf: &mut [f32],
    width: usize,
    dtype: CommDtype,
) -> Result<()> {
    let (rank, size) = (member.rank(), member.size());
    if width == 0 || !buf.len().is_multiple_of(width) {
        bail!(
            "compressed all-reduce of {} values in rows of {width}",
            buf.len()
        );
    }
    let rows = even_chunks(buf.len() / width, size);
    let values = |r: &Range<usize>| r.start * width..r.end * width;
    let sizes = |r: &Range<usize>| dtype.encoded_len(r.len(), width);

    // Reduce-scatter: my chunk from every rank, summed in rank order.
    let parts = rows.iter().map(|r| encode(&buf[values(r)], width, dtype));
    let mine = &rows[rank];
    let received = member.exchange(parts.collect(), &vec![sizes(mine); size])?;
    let mut sum = vec![0f32; mine.len() * width];
    let mut term = vec![0f32; sum.len()];
    for (r, bytes) in received.iter().enumerate() {
        if r == 0 {
            decode(bytes, width, dtype, &mut sum)?;
        } else {
            decode(bytes, width, dtype, &mut term)?;
            sum.iter_mut().zip(&term).for_each(|(s, t)| *s += *t);
        }
    }

    // All-gather of the re-encoded sums.
    let encoded = encode(&sum, width, dtype);
    let all_sizes: Vec<usize> = rows.iter().map(sizes).collect();
    let gathered = member.exchange(vec![encoded; size], &all_sizes)?;
    for (r, bytes) in rows.iter().zip(&gathered) {
        decode(bytes, width, dtype, &mut buf[values(r)])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::even_chunks;

    #[test]
    fn even_chunks_cover_the_items_once_in_order_the_first_ones_longer() {
        assert_eq!(even_chunks(10, 4), vec![0..3, 3..6, 6..8, 8..10]);
        assert_eq!(even_chunks(1, 2), vec![0..1, 1..1]);
        assert_eq!(even_chunks(0, 3), vec![0..0, 0..0, 0..0]);
    }
}
