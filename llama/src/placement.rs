//! Where each kernel of the graph runs: on the chosen backend when it compiles there (its best
//! variant for the device, then the fallbacks) and the device can bind its weights whole,
//! otherwise on the CPU, which runs every kernel of the IR. The executor then moves tensors
//! only where consecutive ops sit on different devices.

use super::error::ModelError;
use super::planner::{KernelKey, KernelShape, Launch};
use std::collections::HashMap;
use std::sync::Arc;
use trine_backends::{Backend, BackendKind, ProgramId};

/// Where a key's kernel runs: the device, the program, and how the variant that compiled is
/// launched.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    pub device: usize,
    pub program: ProgramId,
    pub launch: Launch,
}

/// The devices of one executor: `devices[0]` is the backend asked for; a CPU joins only when
/// a kernel could not run there.
pub struct Placement {
    pub devices: Vec<Arc<dyn Backend>>,
    pub programs: HashMap<KernelKey, Placed>,
    /// The name of the kernel each program was compiled from (the variant that compiled).
    pub kernels: HashMap<ProgramId, String>,
    /// One line per kernel that did not get its preferred variant on the primary device.
    pub notes: Vec<String>,
}

impl Placement {
    /// Places `keys`, whose kernels bind weights of up to `binds[key]` bytes.
    pub fn new(
        primary: Arc<dyn Backend>,
        keys: &[KernelKey],
        shape: KernelShape,
        binds: &HashMap<KernelKey, u64>,
    ) -> Result<Placement, ModelError> {
        let mut p = Placement {
            devices: vec![primary],
            programs: HashMap::new(),
            kernels: HashMap::new(),
            notes: vec![],
        };
        for &key in keys {
            if p.programs.contains_key(&key) {
                continue;
            }
            let limit = p.devices[0].info().max_binding_bytes;
            let placed = match binds.get(&key) {
                Some(&n) if n > limit => Err(format!(
                    "it binds a weight of {n} bytes, more than the device's largest binding of \
                     {limit}"
                )),
                _ => p.compile_on(0, key, shape)?,
            };
            let placed = match placed {
                Ok(placed) => placed,
                Err(reasons) => {
                    let cpu = p.cpu(key, &reasons)?;
                    match p.compile_on(cpu, key, shape)? {
                        Ok(placed) => {
                            p.notes.push(format!(
                                "{key} runs on the cpu: {} could not run it ({reasons})",
                                p.devices[0].name()
                            ));
                            placed
                        }
                        Err(more) => {
                            return Err(ModelError::NoBackendFor {
                                kernel: key.to_string(),
                                reasons: format!("{reasons}; cpu: {more}"),
                            })
                        }
                    }
                }
            };
            p.programs.insert(key, placed);
        }
        Ok(p)
    }

    /// Compiles the first variant of `key` that device `d` accepts; the outer error is a bad
    /// shape, the inner the reasons every variant was refused.
    fn compile_on(
        &mut self,
        d: usize,
        key: KernelKey,
        shape: KernelShape,
    ) -> Result<Result<Placed, String>, ModelError> {
        let dev = &self.devices[d];
        let mut reasons = vec![];
        for (i, variant) in key.variants(dev.info(), shape)?.into_iter().enumerate() {
            let kernel = &variant.kernel;
            match dev.compile(kernel) {
                Ok(program) => {
                    self.kernels.insert(program, kernel.name.clone());
                    if i > 0 {
                        self.notes.push(format!(
                            "{}: {key} runs as its fallback {} ({})",
                            dev.name(),
                            kernel.name,
                            reasons.join("; ")
                        ));
                    }
                    return Ok(Ok(Placed {
                        device: d,
                        program,
                        launch: variant.launch,
                    }));
                }
                Err(e) => reasons.push(format!("{}: {e}", kernel.name)),
            }
        }
        Ok(Err(reasons.join("; ")))
    }

    /// The index of the CPU device, opening it on first need.
    fn cpu(&mut self, key: KernelKey, why: &str) -> Result<usize, ModelError> {
        if let Some(i) = self.devices.iter().position(|d| d.name() == "cpu") {
            return Ok(i);
        }
        let cpu = trine_backends::open(BackendKind::Cpu).map_err(|e| ModelError::NoBackendFor {
            kernel: key.to_string(),
            reasons: format!("{why}; and the cpu backend did not open: {e}"),
        })?;
        self.devices.push(cpu);
        Ok(self.devices.len() - 1)
    }
}
