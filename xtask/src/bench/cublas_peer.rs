//! The CUDA peer: cuBLAS (loaded at run time) on the shapes of the executor's prompt products
//! on matrix tiles, on its own CUDA backend instance of the same GPU, timed with CUDA events
//! under the same policy: f16 A and B (cuBLAS's GemmEx takes one input type), f32 C, where
//! trine's products read f32 x and the model's weights as stored.

use super::measure::{measure, Policy, Stats};
use trine_backends::cuda::cublas::{Gemm, GemmType};
use trine_backends::cuda::CudaBackend;
use trine_backends::{Backend, BackendError, Binding};

pub struct CublasPeer {
    backend: CudaBackend,
}

impl CublasPeer {
    /// cuBLAS on a CUDA device of its own; the reason when there is none.
    pub fn open() -> Result<CublasPeer, String> {
        let backend = CudaBackend::new().map_err(|e| e.to_string())?;
        let version = backend
            .cublas()
            .map(|c| {
                format!(
                    "{:?} from {}",
                    c.library().version(),
                    c.library().path().display()
                )
            })
            .map_err(|e| e.to_string())?;
        eprintln!("cublas: {version}");
        Ok(CublasPeer { backend })
    }

    /// cuBLAS's f16 product of a tiled prompt product's shape, `C[m × n] = A[m × k]·Bᵀ` with
    /// f32 C: the work trine's tiles do, on f16 weights where trine's are mostly quantized.
    pub fn product(&self, policy: &Policy, (m, n, k): (u32, u32, u32)) -> Result<Stats, String> {
        self.time(policy, (m, n, k), 2, GemmType::F16)
            .map_err(|e| e.to_string())
    }

    fn time(
        &self,
        policy: &Policy,
        (m, n, k): (u32, u32, u32),
        elem: u64,
        ty: GemmType,
    ) -> Result<Stats, BackendError> {
        let b = &self.backend;
        let sizes = [
            u64::from(m) * u64::from(k) * elem,
            u64::from(n) * u64::from(k) * elem,
            u64::from(m) * u64::from(n) * 4,
        ];
        let mut bufs = vec![];
        for bytes in sizes {
            let h = b.alloc(bytes)?;
            bufs.push(Binding {
                buffer: h,
                offset: 0,
                size: bytes,
            });
            // Small exact values: the products stay finite whatever the shape.
            let fill: Vec<u8> = match ty {
                GemmType::F32 => 0.25f32.to_le_bytes().repeat((bytes / 4) as usize),
                GemmType::F16 => half::f16::from_f32(0.25)
                    .to_le_bytes()
                    .repeat((bytes / 2) as usize),
            };
            b.write(h, 0, &fill)?;
        }
        let cublas = b.cublas()?;
        let (a, w, c) = (bufs[0], bufs[1], bufs[2]);
        let stats = measure(policy, || {
            if m == 1 {
                // y[n] = W[n × k]·x: the GEMV routine.
                cublas.gemv(w, a, c, n, k, ty)
            } else {
                let shape = Gemm {
                    m,
                    n,
                    k,
                    b_transposed: true,
                };
                cublas.gemm(a, w, c, shape, ty)
            }
        });
        for buf in bufs {
            b.free(buf.buffer);
        }
        stats
    }
}

/// Bytes cuBLAS's product reads and writes: A and B in f16, C in f32.
pub fn product_bytes(m: u32, n: u32, k: u32) -> u64 {
    let (m, n, k) = (u64::from(m), u64::from(n), u64::from(k));
    (m * k + n * k) * 2 + m * n * 4
}
