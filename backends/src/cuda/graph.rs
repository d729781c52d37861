//! Recordings as CUDA graphs: the dispatches are launched once onto the stream under stream
//! capture, and the captured graph is instantiated; a replay is one `cuGraphLaunch`. Kernel
//! arguments (device pointers, parameters) are copied into the graph at capture time.

use super::driver::{CuGraph, CuGraphExec, Driver, CAPTURE_THREAD_LOCAL};
use crate::error::BackendError;
use std::ffi::c_void;

pub struct Graph {
    graph: CuGraph,
    pub exec: CuGraphExec,
}

// SAFETY: plain identifiers of driver objects, used only under the backend's lock with the
// context current.
unsafe impl Send for Graph {}

/// Captures what `launch` queues on `stream` into an instantiated graph. Nothing `launch`
/// queues runs now; if it fails the capture is ended and dropped.
///
/// # Safety
/// `stream` is a live stream of the current context, and nothing else queues work on it or
/// synchronises it while `launch` runs.
pub unsafe fn capture(
    driver: &Driver,
    stream: *mut c_void,
    launch: impl FnOnce() -> Result<(), BackendError>,
) -> Result<Graph, BackendError> {
    // SAFETY: the caller's contract.
    driver.check("cuStreamBeginCapture", unsafe {
        (driver.stream_begin_capture)(stream, CAPTURE_THREAD_LOCAL)
    })?;
    let queued = launch();
    let mut graph: CuGraph = std::ptr::null_mut();
    // SAFETY: the stream is capturing (begun above); ending returns the graph, or null when
    // the capture was invalidated.
    let ended = driver.check("cuStreamEndCapture", unsafe {
        (driver.stream_end_capture)(stream, &mut graph)
    });
    let destroy_graph = |g: CuGraph| {
        if !g.is_null() {
            // SAFETY: a graph the capture returned, not instantiated.
            unsafe { (driver.graph_destroy)(g) };
        }
    };
    if let Err(e) = queued.and(ended) {
        destroy_graph(graph);
        return Err(e);
    }
    let mut exec: CuGraphExec = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and a complete graph.
    if let Err(e) = driver.check("cuGraphInstantiateWithFlags", unsafe {
        (driver.graph_instantiate)(&mut exec, graph, 0)
    }) {
        destroy_graph(graph);
        return Err(e);
    }
    Ok(Graph { graph, exec })
}

/// # Safety
/// No launch of `g` is pending, and the context it was made in is current.
pub unsafe fn destroy(driver: &Driver, g: Graph) {
    // SAFETY: the caller's contract.
    unsafe {
        (driver.graph_exec_destroy)(g.exec);
        (driver.graph_destroy)(g.graph);
    }
}
