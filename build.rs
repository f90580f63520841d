//! The CUDA build compiles `kernels/*.cu` to PTX (loaded at run time by `ops::cuda`); the
//! CPU build has nothing to do here.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=kernels");
    #[cfg(feature = "cuda")]
    cuda::build_ptx();
}

#[cfg(feature = "cuda")]
mod cuda {
    pub fn build_ptx() {
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
        let ptx = cudaforge::KernelBuilder::new()
            .source_dir("kernels")
            .arg("-std=c++17")
            .arg("-O3")
            .build_ptx()
            .unwrap_or_else(|e| panic!("compiling kernels/*.cu to PTX failed: {e}"));
        ptx.write(out.join("ptx.rs"))
            .unwrap_or_else(|e| panic!("writing the PTX bindings failed: {e}"));
    }
}
