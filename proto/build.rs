//! Compiles the converge contract with a vendored `protoc`, so no system
//! protobuf compiler is needed.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut files = Vec::new();
    collect_protos(&root.join("converge"), &mut files)?;
    files.sort();
    // Error details are not imported by the contract, but clients decode them:
    // compiling them puts them in the reflection descriptors (so `buf curl`
    // and grpcurl can show ErrorInfo and BadRequest) and in the Rust crate.
    files.push(root.join("google/rpc/error_details.proto"));
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    // A directory is scanned whole: a new .proto file reruns the build too.
    println!("cargo:rerun-if-changed={}", root.join("converge").display());
    println!("cargo:rerun-if-changed={}", root.join("google").display());

    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Ordered maps encode deterministically, so equal requests hash equally
    // (idempotency keys compare request hashes).
    config.btree_map(["."]);
    let includes = [root.clone(), protoc_bin_vendored::include_path()?];
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .file_descriptor_set_path(out_dir.join("converge_descriptor.bin"))
        .compile_with_config(config, &files, &includes)?;
    Ok(())
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
