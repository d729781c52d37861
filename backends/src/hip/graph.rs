//! Recordings as HIP graphs, where the runtime has them: the dispatches are launched once
//! under stream capture and the captured graph instantiated; a replay is one `hipGraphLaunch`.

use super::ffi::{self, Graph as RawGraph, GraphExec, Graphs, Hip, Stream};
use crate::error::BackendError;

pub struct Graph {
    graph: RawGraph,
    pub exec: GraphExec,
}

// SAFETY: plain identifiers of runtime objects, used only under the backend's lock.
unsafe impl Send for Graph {}

/// Captures what `launch` queues on `stream` into an instantiated graph; if it fails the
/// capture is ended and dropped.
///
/// # Safety
/// `stream` is a live stream of the current device, and nothing else queues work on it or
/// synchronises it while `launch` runs.
pub unsafe fn capture(
    hip: &Hip,
    g: &Graphs,
    stream: Stream,
    launch: impl FnOnce() -> Result<(), BackendError>,
) -> Result<Graph, BackendError> {
    // SAFETY: the caller's contract.
    hip.check("hipStreamBeginCapture", unsafe {
        (g.hipStreamBeginCapture)(stream, ffi::CAPTURE_THREAD_LOCAL)
    })?;
    let queued = launch();
    let mut graph: RawGraph = std::ptr::null_mut();
    // SAFETY: the stream is capturing (begun above).
    let ended = hip.check("hipStreamEndCapture", unsafe {
        (g.hipStreamEndCapture)(stream, &mut graph)
    });
    let drop_graph = |raw: RawGraph| {
        if !raw.is_null() {
            // SAFETY: a graph the capture returned, not instantiated.
            unsafe { (g.hipGraphDestroy)(raw) };
        }
    };
    if let Err(e) = queued.and(ended) {
        drop_graph(graph);
        return Err(e);
    }
    let mut exec: GraphExec = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and a complete graph; no error node or log is asked for.
    let made = hip.check("hipGraphInstantiate", unsafe {
        (g.hipGraphInstantiate)(
            &mut exec,
            graph,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    });
    if let Err(e) = made {
        drop_graph(graph);
        return Err(e);
    }
    Ok(Graph { graph, exec })
}

/// # Safety
/// No launch of `graph` is pending.
pub unsafe fn destroy(g: &Graphs, graph: Graph) {
    // SAFETY: the caller's contract.
    unsafe {
        (g.hipGraphExecDestroy)(graph.exec);
        (g.hipGraphDestroy)(graph.graph);
    }
}
