//! What the probe child tells its parent: one line per event on stdout, a fixed prefix and a
//! JSON object, so that anything else a runtime library prints there is told apart and ignored.

use crate::info::DeviceInfo;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Prefix of every protocol line.
pub const PREFIX: &str = "trine-probe ";

/// The steps of a probe, in the order the child runs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// The child started but reported nothing yet (it hung or died while being loaded).
    Spawn,
    /// Opening the backend: loading its libraries, initialising the runtime, the device.
    Init,
    /// Reading the device's properties.
    Query,
    /// Allocating two small buffers and writing the input.
    Upload,
    /// Lowering and compiling the probe kernel.
    Compile,
    /// Queuing the kernel.
    Launch,
    /// Waiting for the kernel.
    Synchronize,
    /// Reading the output.
    Download,
    /// Checking the output against the expected values.
    Compare,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Spawn => "spawn",
            Step::Init => "init",
            Step::Query => "query",
            Step::Upload => "upload",
            Step::Compile => "compile",
            Step::Launch => "launch",
            Step::Synchronize => "synchronize",
            Step::Download => "download",
            Step::Compare => "compare",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    Start(Step),
    Done(Step),
    /// The step failed with an error (not a hang or a crash); the child exits after it.
    Fail {
        step: Step,
        reason: String,
    },
    /// The device's properties, sent during [`Step::Query`].
    Info(Box<DeviceInfo>),
}

impl Line {
    /// The line as written, without its newline.
    pub fn encode(&self) -> String {
        // Serialising plain data with string keys cannot fail; an empty object would only be
        // ignored by the parent.
        format!(
            "{PREFIX}{}",
            serde_json::to_string(self).unwrap_or_else(|_| "{}".into())
        )
    }

    /// The event a line of the child's stdout carries, `None` for other output.
    pub fn decode(line: &str) -> Option<Line> {
        serde_json::from_str(line.trim_end().strip_prefix(PREFIX)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_other_output_is_ignored() {
        let lines = [
            Line::Start(Step::Init),
            Line::Done(Step::Compare),
            Line::Fail {
                step: Step::Launch,
                reason: "hipModuleLaunchKernel failed: 98\nsecond line".into(),
            },
        ];
        for l in lines {
            let text = l.encode();
            assert!(!text.contains('\n'), "{text}");
            assert_eq!(Line::decode(&text), Some(l));
        }
        assert_eq!(Line::decode(r#"{"start":"init"}"#), None);
        assert_eq!(Line::decode("trine-probe not json"), None);
        assert_eq!(
            Line::decode("trine-probe {\"start\":\"launch\"}\r\n"),
            Some(Line::Start(Step::Launch))
        );
    }
}
