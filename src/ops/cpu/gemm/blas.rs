//! A system BLAS's `cblas_sgemm`, found at run time (`matmul: blas`): MKL where it is
//! installed, else OpenBLAS, or the library `TP_BLAS` names. Loaded with `dlopen`, so
//! the build needs no BLAS and a run that does not ask for one never touches it.
//!
//! Each product is computed by one call on the calling thread: the library is set to
//! one thread (MKL's sequential layer, `openblas_set_num_threads(1)`) and the harness
//! shares a product between its own threads as it does for gemm ([`super::split`]), so
//! the thread count of a rank stays the harness's. MKL is put in its strict
//! conditional-numerical-reproducibility mode: the same bits run to run whatever the
//! buffers' alignment.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Libraries tried in order when `TP_BLAS` is not set: MKL's single dynamic library
/// (the distribution's `libmkl-rt` or PyPI's `mkl`, found on `LD_LIBRARY_PATH`), then
/// OpenBLAS (Debian's `libopenblas0-*`), then BLIS.
const CANDIDATES: [&str; 6] = [
    "libmkl_rt.so.2",
    "libmkl_rt.so.3",
    "libmkl_rt.so",
    "libopenblas.so.0",
    "libopenblas.so",
    "libblis.so.4",
];

// CBLAS's enums (cblas.h).
const ROW_MAJOR: c_int = 101;
const NO_TRANS: c_int = 111;
const TRANS: c_int = 112;
// mkl_service.h / mkl_cbwr.h.
const MKL_THREADING_SEQUENTIAL: c_int = 1;
const MKL_INTERFACE_LP64: c_int = 0;
const MKL_CBWR_AUTO: c_int = 2;
const MKL_CBWR_STRICT: c_int = 0x10000;

type Sgemm = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    f32,
    *mut f32,
    c_int,
);

/// The loaded library: its `cblas_sgemm` and what it is.
pub struct Blas {
    sgemm: Sgemm,
    /// What ran, for the run's records: e.g. `MKL 2025.3.0 (libmkl_rt.so.3)`.
    pub name: String,
    /// A warning about this library on this CPU, if any (OpenBLAS's fallback kernels).
    pub warning: Option<String>,
}

/// The library, loaded on first use: the one `TP_BLAS` names, else the first of
/// [`CANDIDATES`] there is. An error is one line naming the fix.
pub fn library() -> Result<&'static Blas, String> {
    static BLAS: OnceLock<Result<Blas, String>> = OnceLock::new();
    BLAS.get_or_init(|| match std::env::var("TP_BLAS") {
        Ok(named) if !named.trim().is_empty() => open(named.trim()).ok_or_else(|| {
            format!("TP_BLAS={named}: no BLAS with cblas_sgemm could be loaded from it (give the path of libmkl_rt.so or libopenblas.so.0, or unset it)")
        }),
        _ => CANDIDATES.iter().find_map(|c| open(c)).ok_or_else(|| {
            "matmul: blas found no BLAS library: install one (apt-get install libopenblas0-pthread, or pip install mkl and add its lib folder to LD_LIBRARY_PATH), name it with TP_BLAS=/path/to/libmkl_rt.so, or use matmul: gemm".to_string()
        }),
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// `dlopen`s `file` and sets it up, if it is a CBLAS.
fn open(file: &str) -> Option<Blas> {
    let c = CString::new(file).ok()?;
    // SAFETY: a NUL-terminated path; the handle is kept for the process's life (never
    // closed), so the function pointers taken from it stay valid.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: CBLAS's documented signature.
    let sgemm: Sgemm = unsafe { std::mem::transmute(symbol(handle, c"cblas_sgemm")?) };
    let base = file.rsplit('/').next().unwrap_or(file);
    let (name, warning) = if let Some(set_layer) = symbol(handle, c"MKL_Set_Threading_Layer") {
        // SAFETY: MKL's service functions, with their documented signatures, called
        // before its first product.
        unsafe {
            // 32-bit integers, as the call below passes them, whatever MKL_INTERFACE_LAYER says.
            if let Some(interface) = symbol(handle, c"MKL_Set_Interface_Layer") {
                let interface: unsafe extern "C" fn(c_int) -> c_int =
                    std::mem::transmute(interface);
                interface(MKL_INTERFACE_LP64);
            }
            let set_layer: unsafe extern "C" fn(c_int) -> c_int = std::mem::transmute(set_layer);
            set_layer(MKL_THREADING_SEQUENTIAL);
            if let Some(cbwr) = symbol(handle, c"MKL_CBWR_Set") {
                let cbwr: unsafe extern "C" fn(c_int) -> c_int = std::mem::transmute(cbwr);
                cbwr(MKL_CBWR_AUTO | MKL_CBWR_STRICT);
            }
        }
        (format!("MKL {} ({base})", mkl_version(handle)), None)
    } else if let Some(set_threads) = symbol(handle, c"openblas_set_num_threads") {
        // SAFETY: OpenBLAS's documented signatures.
        let core = unsafe {
            let set_threads: unsafe extern "C" fn(c_int) = std::mem::transmute(set_threads);
            set_threads(1);
            text_of(handle, c"openblas_get_corename")
        };
        let config = unsafe { text_of(handle, c"openblas_get_config") };
        let version = config
            .as_deref()
            .and_then(|c| c.split_whitespace().nth(1))
            .unwrap_or("?");
        let core = core.unwrap_or_else(|| "?".into());
        (
            format!("OpenBLAS {version}, {core} kernels ({base})"),
            openblas_warning(&core),
        )
    } else {
        (format!("a CBLAS ({base})"), None)
    };
    Some(Blas {
        sgemm,
        name,
        warning,
    })
}

fn symbol(handle: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: a live handle and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The text a `const char *f(void)` of the library returns.
///
/// # Safety
/// `name` must be such a function of the library.
unsafe fn text_of(handle: *mut c_void, name: &CStr) -> Option<String> {
    let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(symbol(handle, name)?);
    let p = f();
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().trim().to_string())
}

fn mkl_version(handle: *mut c_void) -> String {
    let Some(f) = symbol(handle, c"MKL_Get_Version_String") else {
        return "?".into();
    };
    let mut buf = [0 as c_char; 256];
    // SAFETY: MKL writes at most `len` bytes, NUL-terminated.
    let text = unsafe {
        let f: unsafe extern "C" fn(*mut c_char, c_int) = std::mem::transmute(f);
        f(buf.as_mut_ptr(), buf.len() as c_int);
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    };
    // "Intel(R) oneAPI Math Kernel Library Version 2025.3.0-Product Build ..."
    text.split("Version ")
        .nth(1)
        .and_then(|v| v.split(['-', ' ']).next())
        .unwrap_or("?")
        .to_string()
}

/// OpenBLAS picks its kernels by the CPU model it knows; on a newer CPU an older release
/// falls back to SSE3 ones (Debian 12's 0.3.21 on an Emerald Rapids Xeon: `Prescott`),
/// several times slower than gemm. Said, with the fix.
fn openblas_warning(core: &str) -> Option<String> {
    let wide = crate::ops::cpu::simd::detected() == crate::ops::cpu::simd::SimdLevel::Avx512;
    let narrow = [
        "Prescott",
        "Nehalem",
        "Core2",
        "Penryn",
        "Dunnington",
        "Atom",
    ];
    (wide && narrow.iter().any(|n| core.eq_ignore_ascii_case(n))).then(|| {
        format!("OpenBLAS did not recognise this CPU and runs its {core} (SSE) kernels: set OPENBLAS_CORETYPE=SkylakeX for its AVX-512 ones, or use MKL or matmul: gemm")
    })
}

/// How a strided view reads as a CBLAS row-major operand: transposed or not, and its
/// leading dimension. `None` when neither stride is 1 (a gather BLAS cannot express).
fn operand(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<(c_int, usize)> {
    if cs == 1 && (rows <= 1 || rs >= cols.max(1)) {
        Some((NO_TRANS, rs.max(cols).max(1)))
    } else if rs == 1 && (cols <= 1 || cs >= rows.max(1)) {
        Some((TRANS, cs.max(rows).max(1)))
    } else if rows <= 1 {
        // One row of stride `cs`: the transpose of a column with that row stride.
        Some((TRANS, cs.max(1)))
    } else if cols <= 1 {
        Some((NO_TRANS, rs.max(1)))
    } else {
        None
    }
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// The products a BLAS has computed in this process (what shows that a route was taken).
pub fn calls() -> usize {
    CALLS.load(Ordering::Relaxed)
}

/// A product's operands as pointers and strides: `(ptr, rows, cols, rs, cs)`.
pub(super) type Operand = (*const f32, usize, usize, usize, usize);

/// `dst (+)= a @ b` by one `cblas_sgemm` on this thread, `dst` row-major or column-major
/// with any leading dimension; `false` (nothing done) when a view has no unit stride.
///
/// # Safety
/// As `gemm::gemm`: valid, non-overlapping matrices; `dst` initialised when `accumulate`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn sgemm(
    blas: &Blas,
    dst: *mut f32,
    (m, n): (usize, usize),
    (dst_rs, dst_cs): (usize, usize),
    accumulate: bool,
    a: Operand,
    b: Operand,
    k: usize,
) -> bool {
    let fits = |x: usize| x <= c_int::MAX as usize;
    if !(fits(m) && fits(n) && fits(k)) {
        return false;
    }
    // A column-major destination is the row-major transpose: C^T = B^T A^T.
    let (m, n, ldc, a, b) = if dst_cs == 1 && (m <= 1 || dst_rs >= n) {
        (m, n, dst_rs.max(n).max(1), a, b)
    } else if dst_rs == 1 && (n <= 1 || dst_cs >= m) {
        let t = |(p, r, c, rs, cs): Operand| (p, c, r, cs, rs);
        (n, m, dst_cs.max(m).max(1), t(b), t(a))
    } else {
        return false;
    };
    let (Some((ta, lda)), Some((tb, ldb))) =
        (operand(a.1, a.2, a.3, a.4), operand(b.1, b.2, b.3, b.4))
    else {
        return false;
    };
    if !(fits(lda) && fits(ldb) && fits(ldc)) {
        return false;
    }
    let beta = if accumulate { 1.0 } else { 0.0 };
    CALLS.fetch_add(1, Ordering::Relaxed);
    (blas.sgemm)(
        ROW_MAJOR,
        ta,
        tb,
        m as c_int,
        n as c_int,
        k as c_int,
        1.0,
        a.0,
        lda as c_int,
        b.0,
        ldb as c_int,
        beta,
        dst,
        ldc as c_int,
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::cpu::gemm::tests::{assert_strided_equals, naive};

    /// Each view the kernels make reads as the CBLAS operand it is: row-major as is,
    /// a transposed view (unit row stride) as `Trans` of its storage, one row or one
    /// column of any stride as a vector; a gather of two non-unit strides is refused.
    #[test]
    fn strided_views_map_to_cblas_operands_or_are_refused() {
        assert_eq!(operand(4, 3, 3, 1), Some((NO_TRANS, 3)));
        assert_eq!(operand(4, 3, 10, 1), Some((NO_TRANS, 10)));
        assert_eq!(operand(4, 3, 1, 4), Some((TRANS, 4)));
        assert_eq!(operand(4, 3, 1, 9), Some((TRANS, 9)));
        assert_eq!(operand(1, 5, 0, 7), Some((TRANS, 7)));
        assert_eq!(operand(5, 1, 7, 0), Some((NO_TRANS, 7)));
        assert_eq!(operand(4, 3, 6, 2), None);
        // A row stride shorter than a row would make CBLAS read past it: refused.
        assert_eq!(operand(4, 3, 2, 1), None);
    }

    /// Where a BLAS is installed, its products equal a naive one on plain, transposed,
    /// strided and accumulated views with row- and column-major destinations; where none
    /// is, the error names the fix.
    #[test]
    fn blas_products_match_a_naive_matmul_or_the_missing_library_names_the_fix() {
        let lib = match library() {
            Ok(lib) => lib,
            Err(e) => {
                assert!(e.contains("matmul: gemm") || e.contains("TP_BLAS"), "{e}");
                return;
            }
        };
        for (m, k, n) in [(1, 1, 1), (37, 19, 53), (64, 128, 48), (3, 300, 2)] {
            let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            let want = naive(&a, &b, m, k, n);
            let b_plain: Operand = (b.as_ptr(), k, n, n, 1);
            let b_transposed: Operand = (bt.as_ptr(), k, n, 1, k);
            for (b_view, rows_major, accumulate) in [
                (b_plain, true, false),
                (b_transposed, true, true),
                (b_plain, false, true),
                (b_transposed, false, false),
            ] {
                let mut c = vec![if accumulate { 1.0f32 } else { f32::NAN }; m * n];
                let (rs, cs) = if rows_major { (n, 1) } else { (1, m) };
                // SAFETY: the buffers hold exactly these matrices.
                let done = unsafe {
                    sgemm(
                        lib,
                        c.as_mut_ptr(),
                        (m, n),
                        (rs, cs),
                        accumulate,
                        (a.as_ptr(), m, k, k, 1),
                        b_view,
                        k,
                    )
                };
                assert!(done);
                let plus = if accumulate { 1.0 } else { 0.0 };
                assert_strided_equals(&c, (rs, cs), &want, n, plus, &format!("{m}x{k}x{n}"));
            }
        }
    }
}
