//! What a dispatch costs inside a recording: 150 copies (`y = x + 1`) replayed as one, each
//! reading what the one before wrote (so Vulkan puts a barrier before each and a CUDA graph
//! orders them) or all independent, over 1 and 480 workgroups. Host time of a replay and the
//! wait for it; divide by 150 for a dispatch.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use trine_backends::{open_all, Backend, BackendKind, Binding, BufferHandle, Dispatch};
use trine_ir::{Access, KernelBuilder, Scalar};

const CHAIN: usize = 150;

fn copy_kernel() -> trine_ir::Kernel {
    let k = KernelBuilder::new("chain_copy", [128, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let i = k.global_id(0);
    k.store(y, i, k.load(x, i) + k.f32(1.0));
    k.finish()
}

fn chain(c: &mut Criterion, name: &str, backend: &dyn Backend) {
    let program = backend.compile(&copy_kernel()).expect("compile chain_copy");
    for workgroups in [1u32, 480] {
        let bytes = u64::from(workgroups) * 128 * 4;
        let buffers: Vec<BufferHandle> = (0..CHAIN + 2)
            .map(|_| backend.alloc(bytes).expect("alloc"))
            .collect();
        let bind = |b: usize| Binding {
            buffer: buffers[b],
            offset: 0,
            size: bytes,
        };
        let dependent: Vec<[Binding; 2]> = (0..CHAIN)
            .map(|i| [bind(i % 2), bind((i + 1) % 2)])
            .collect();
        let independent: Vec<[Binding; 2]> = (0..CHAIN).map(|i| [bind(0), bind(i + 2)]).collect();
        for (kind, list) in [("dependent", &dependent), ("independent", &independent)] {
            let dispatches: Vec<Dispatch<'_>> = list
                .iter()
                .map(|bindings| Dispatch {
                    program,
                    grid: [workgroups, 1, 1],
                    bindings,
                    params: &[],
                })
                .collect();
            let recording = backend.record(&dispatches).expect("record");
            c.bench_function(&format!("{name}/chain150_{kind}/wg{workgroups}"), |b| {
                b.iter(|| {
                    backend.replay(&recording).expect("replay");
                    backend.synchronize().expect("synchronize");
                })
            });
            backend.release(recording);
        }
        for b in buffers {
            backend.free(b);
        }
    }
}

fn benches(c: &mut Criterion) {
    for opened in open_all(&BackendKind::ALL) {
        match opened.backend {
            Err(e) => println!("{}: skipped: {e}", opened.kind),
            Ok(backend) => chain(c, &opened.kind.to_string(), backend.as_ref()),
        }
    }
}

criterion_group! {
    name = group;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(300));
    targets = benches
}
criterion_main!(group);
