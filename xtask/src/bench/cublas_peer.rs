//! The CUDA peer: cuBLAS (loaded at run time) on the GEMV and matmul shapes, on its own CUDA
//! backend instance of the same GPU, timed with CUDA events under the same policy. Its f16
//! products take f16 for both inputs (cuBLAS's GemmEx needs one input type), where trine's
//! f16 matmul reads f32 activations: a little less data for cuBLAS.

use super::measure::{measure, Policy, Stats};
use super::ops::{Item, Op};
use trine_backends::cuda::cublas::{Gemm, GemmType};
use trine_backends::cuda::CudaBackend;
use trine_backends::{Backend, BackendError, Binding};
use trine_gguf::quant::WeightType;
use trine_ops::support::Float;

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

    /// The item timed through cuBLAS, or `None` for ops cuBLAS has no routine for.
    pub fn run(&self, item: &Item, policy: &Policy) -> Option<Result<Stats, String>> {
        let ty = match item.op {
            Op::Matvec {
                ty: WeightType::F32,
                ..
            }
            | Op::Matmul { b: Float::F32, .. } => GemmType::F32,
            Op::Matvec {
                ty: WeightType::F16,
                ..
            }
            | Op::Matmul { b: Float::F16, .. }
            | Op::MatmulTiles {
                ty: WeightType::F16,
                ..
            } => GemmType::F16,
            _ => return None,
        };
        let elem = match ty {
            GemmType::F32 => 4,
            GemmType::F16 => 2,
        };
        let (m, n, k) = match item.op {
            Op::Matvec { rows, cols, .. } => (1, rows, cols),
            Op::Matmul { m, n, k, .. } | Op::MatmulTiles { m, n, k, .. } => (m, n, k),
            _ => return None,
        };
        Some(
            self.time(policy, (m, n, k), elem, ty)
                .map_err(|e| e.to_string()),
        )
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
