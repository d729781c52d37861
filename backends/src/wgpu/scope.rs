//! wgpu reports a bad call through the device's error scopes, or else to its uncaptured-error
//! handler, whose default panics. Every call of trine's that can fail runs inside scopes of its
//! own, so its errors come back as [`BackendError`]s and never reach the handler of a host
//! application that shares the device.

use crate::error::BackendError;

/// What a scope caught.
#[derive(Debug)]
pub enum Caught {
    OutOfMemory,
    /// A validation or internal error, with its sources.
    Error(String),
}

impl Caught {
    /// The error of `call`.
    pub fn during(self, call: &'static str) -> BackendError {
        BackendError::Driver {
            call,
            code: match self {
                Caught::OutOfMemory => "out of device memory".into(),
                Caught::Error(message) => message,
            },
        }
    }
}

/// Runs `f` inside out-of-memory, validation and internal error scopes (thread-local in wgpu,
/// so they catch exactly what `f` does on this thread) and returns the first error caught.
pub fn catch<T>(device: &wgpu::Device, f: impl FnOnce() -> T) -> Result<T, Caught> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let out = f();
    // Scopes pop innermost first; on native the futures are ready at once.
    let errors = [internal.pop(), validation.pop()];
    if pollster::block_on(oom.pop()).is_some() {
        return Err(Caught::OutOfMemory);
    }
    for e in errors {
        if let Some(e) = pollster::block_on(e) {
            return Err(Caught::Error(error_chain(&e)));
        }
    }
    Ok(out)
}

/// [`catch`] with the error as `call`'s.
pub fn scoped<T>(
    device: &wgpu::Device,
    call: &'static str,
    f: impl FnOnce() -> T,
) -> Result<T, BackendError> {
    catch(device, f).map_err(|c| c.during(call))
}

/// An error and its sources: wgpu's top-level message often names only the call.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}
