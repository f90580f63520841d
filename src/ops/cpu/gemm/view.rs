//! Safe strided matrix views over f32 slices, and the raw destination the products
//! write through. Strides let a kernel multiply by a transpose, or by one head's columns
//! of a packed QKV buffer, without copying it first.

/// Element (i, j) of a view is `data[i * rs + j * cs]`.
#[derive(Debug, Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `(rows, cols)` matrix starting at `data[0]`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    /// `(rows, cols)` with row stride `rs` and unit column stride, starting at `data[0]`.
    pub fn strided(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        let m = Self {
            data,
            rows,
            cols,
            rs,
            cs,
        };
        assert!(m.fits(data.len()), "matrix view out of bounds");
        m
    }

    pub fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Rows `r0..r1` and columns `c0..c1` of this view.
    pub fn block(self, r0: usize, r1: usize, c0: usize, c1: usize) -> Self {
        assert!(r0 <= r1 && r1 <= self.rows && c0 <= c1 && c1 <= self.cols);
        let at = if r1 > r0 && c1 > c0 {
            r0 * self.rs + c0 * self.cs
        } else {
            0
        };
        Self::strided(&self.data[at..], r1 - r0, c1 - c0, self.rs, self.cs)
    }

    fn fits(&self, len: usize) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.rs + (self.cols - 1) * self.cs < len
    }
}

/// A mutable view, as [`Mat`].
#[derive(Debug)]
pub struct MatMut<'a> {
    pub data: &'a mut [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> MatMut<'a> {
    pub fn rows(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols, 1)
    }

    pub fn strided(data: &'a mut [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Self {
        let fits = rows == 0 || cols == 0 || (rows - 1) * rs + (cols - 1) * cs < data.len();
        assert!(fits, "matrix view out of bounds");
        Self {
            data,
            rows,
            cols,
            rs,
            cs,
        }
    }
}

/// A destination by pointer: `(i, j)` at `ptr + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(super) struct Out {
    pub ptr: *mut f32,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

// SAFETY: an `Out` is only sent to the threads of a split product (`super::split`),
// each of which writes a disjoint block of it.
unsafe impl Send for Out {}
