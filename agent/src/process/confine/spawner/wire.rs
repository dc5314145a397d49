//! What the bot and the standing spawner say to each other over their socket pair
//! (`SOCK_SEQPACKET`: one message is one request or one reply, never split or merged).
//!
//! A request carries the three standard descriptors of the child (`SCM_RIGHTS`), then, when
//! the call has a cgroup, its `cgroup.procs` open for writing (the child writes itself into
//! it before exec), and, in its bytes: `SPRQ`, the request id (u64), flags (u32), the counts of arguments and of
//! environment entries (u32 each), then NUL-terminated strings: the working directory, the
//! program to exec, the arguments (`argv[0]` first), the environment (`NAME=value`). Numbers
//! are little-endian. A reply is 24 bytes: its kind (u32), 4 bytes of padding, the request id
//! (u64), the child's pid (i32) and a value (i32): the `errno` of a failed start, the wait
//! status of an exit.

use std::ffi::{CStr, CString};

/// The most bytes of one request. A command longer than this is started the old way (a
/// launcher of its own), as is anything the socket could not carry in one message.
pub(crate) const MAX_REQUEST: usize = 64 * 1024;

/// The most descriptors one request carries: stdin, stdout, stderr and the cgroup.
pub(crate) const MAX_FDS: usize = 4;

/// Bytes of one reply.
pub(crate) const REPLY_LEN: usize = 24;

const MAGIC: &[u8; 4] = b"SPRQ";
const HEADER_LEN: usize = 4 + 8 + 4 + 4 + 4;

/// Flag: the child leads a process group of its own (`setpgid(0, 0)`), as
/// `Command::process_group(0)`.
pub(crate) const OWN_GROUP: u32 = 1;

/// One child to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// Chosen by the bot; every reply about this child names it.
    pub id: u64,
    /// [`OWN_GROUP`] or 0.
    pub flags: u32,
    /// The child's working directory.
    pub cwd: CString,
    /// The file to exec (a path: the bot looked it up on the child's `PATH`).
    pub program: CString,
    /// `argv`, `argv[0]` first.
    pub args: Vec<CString>,
    /// The whole environment, `NAME=value` each.
    pub env: Vec<CString>,
}

/// Why a request could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    /// Shorter than its header or its strings say, or without the magic.
    #[error("a malformed spawn request")]
    Malformed,
    /// Longer than [`MAX_REQUEST`].
    #[error("a spawn request over {MAX_REQUEST} bytes")]
    TooLong,
}

impl Request {
    /// The request as one message; [`WireError::TooLong`] past [`MAX_REQUEST`].
    pub(crate) fn encode(&self) -> Result<Vec<u8>, WireError> {
        let strings = std::iter::once(&self.cwd)
            .chain(std::iter::once(&self.program))
            .chain(&self.args)
            .chain(&self.env);
        let len = HEADER_LEN
            + strings
                .clone()
                .map(|s| s.as_bytes_with_nul().len())
                .sum::<usize>();
        if len > MAX_REQUEST {
            return Err(WireError::TooLong);
        }
        let count = |n: usize| u32::try_from(n).map_err(|_| WireError::TooLong);
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&count(self.args.len())?.to_le_bytes());
        out.extend_from_slice(&count(self.env.len())?.to_le_bytes());
        for s in strings {
            out.extend_from_slice(s.as_bytes_with_nul());
        }
        Ok(out)
    }

    /// Reads one message back.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() > MAX_REQUEST {
            return Err(WireError::TooLong);
        }
        if bytes.len() < HEADER_LEN || &bytes[..4] != MAGIC {
            return Err(WireError::Malformed);
        }
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(b)
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[4..12]);
        let (flags, nargs, nenv) = (u32_at(12), u32_at(16), u32_at(20));
        let mut rest = &bytes[HEADER_LEN..];
        let mut next = || -> Result<CString, WireError> {
            let s = CStr::from_bytes_until_nul(rest).map_err(|_| WireError::Malformed)?;
            rest = &rest[s.to_bytes_with_nul().len()..];
            Ok(s.to_owned())
        };
        let cwd = next()?;
        let program = next()?;
        // Every string takes at least its NUL, so a count past the bytes left is a lie.
        let left = bytes.len() - HEADER_LEN;
        let (nargs, nenv) = (nargs as usize, nenv as usize);
        if nargs.saturating_add(nenv) > left {
            return Err(WireError::Malformed);
        }
        let args = (0..nargs).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
        let env = (0..nenv).map(|_| next()).collect::<Result<Vec<_>, _>>()?;
        if args.is_empty() || !rest.is_empty() {
            return Err(WireError::Malformed);
        }
        Ok(Self {
            id: u64::from_le_bytes(id),
            flags,
            cwd,
            program,
            args,
            env,
        })
    }
}

/// What the spawner says about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// The child runs the program (its exec succeeded).
    Started {
        /// The request.
        id: u64,
        /// The child.
        pid: i32,
    },
    /// No child runs: `errno` of what failed (the working directory, the exec, the fork).
    Failed {
        /// The request.
        id: u64,
        /// What failed.
        errno: i32,
    },
    /// The child ended; `status` is as `waitpid` gives it.
    Exited {
        /// The request.
        id: u64,
        /// The child.
        pid: i32,
        /// Its wait status.
        status: i32,
    },
}

impl Reply {
    /// The reply as one message.
    pub(crate) fn encode(self) -> [u8; REPLY_LEN] {
        let (kind, id, pid, value) = match self {
            Reply::Started { id, pid } => (1u32, id, pid, 0),
            Reply::Failed { id, errno } => (2, id, 0, errno),
            Reply::Exited { id, pid, status } => (3, id, pid, status),
        };
        let mut out = [0u8; REPLY_LEN];
        out[..4].copy_from_slice(&kind.to_le_bytes());
        out[8..16].copy_from_slice(&id.to_le_bytes());
        out[16..20].copy_from_slice(&pid.to_le_bytes());
        out[20..24].copy_from_slice(&value.to_le_bytes());
        out
    }

    /// Reads one message back; `None` for anything that is not a reply.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != REPLY_LEN {
            return None;
        }
        let i32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            i32::from_le_bytes(b)
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[8..16]);
        let id = u64::from_le_bytes(id);
        let (pid, value) = (i32_at(16), i32_at(20));
        match i32_at(0) {
            1 => Some(Reply::Started { id, pid }),
            2 => Some(Reply::Failed { id, errno: value }),
            3 => Some(Reply::Exited {
                id,
                pid,
                status: value,
            }),
            _ => None,
        }
    }

    /// The request this reply is about.
    pub(crate) fn id(self) -> u64 {
        match self {
            Reply::Started { id, .. } | Reply::Failed { id, .. } | Reply::Exited { id, .. } => id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn c(s: &str) -> CString {
        CString::new(s).expect("no NUL")
    }

    fn request() -> Request {
        Request {
            id: 0x0102_0304_0506_0708,
            flags: OWN_GROUP,
            cwd: c("/srv/work/a b"),
            program: c("/usr/bin/bash"),
            args: vec![c("/usr/bin/bash"), c("-c"), c("echo 'hi there'")],
            env: vec![
                c("PATH=/usr/bin:/bin"),
                c("SANDPIPER_CALL_ID=abc"),
                c("EMPTY="),
            ],
        }
    }

    #[test]
    fn a_request_reads_back_as_written() {
        let sent = request();
        assert_eq!(Request::decode(&sent.encode().expect("fits")), Ok(sent));
        let bare = Request {
            env: Vec::new(),
            flags: 0,
            ..request()
        };
        assert_eq!(Request::decode(&bare.encode().expect("fits")), Ok(bare));
    }

    #[test]
    fn every_reply_reads_back_as_written() {
        for reply in [
            Reply::Started { id: 7, pid: 4242 },
            Reply::Failed {
                id: u64::MAX,
                errno: libc::ENOENT,
            },
            Reply::Exited {
                id: 9,
                pid: 1,
                status: 0x0100,
            },
        ] {
            assert_eq!(Reply::decode(&reply.encode()), Some(reply));
        }
        assert_eq!(Reply::decode(&[0; REPLY_LEN]), None);
        assert_eq!(Reply::decode(&[1; REPLY_LEN - 1]), None);
    }

    #[test]
    fn a_request_over_the_limit_is_refused_on_both_sides() {
        let long = Request {
            args: vec![
                c("bash"),
                c("-c"),
                CString::new(vec![b'x'; MAX_REQUEST]).expect("no NUL"),
            ],
            ..request()
        };
        assert_eq!(long.encode(), Err(WireError::TooLong));
        assert_eq!(
            Request::decode(&vec![0u8; MAX_REQUEST + 1]),
            Err(WireError::TooLong)
        );
    }

    #[test]
    fn malformed_requests_are_refused_not_trusted() {
        let good = request().encode().expect("fits");
        let mut cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"SPRQ".to_vec(),
            good[..good.len() - 1].to_vec(), // the last string's NUL is missing
            [&good[..], b"x\0"].concat(),    // bytes past the last string
        ];
        let mut bad_magic = good.clone();
        bad_magic[0] = b'X';
        cases.push(bad_magic);
        let mut huge_count = good.clone();
        huge_count[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        cases.push(huge_count);
        let mut no_args = request();
        no_args.args.clear();
        cases.push(no_args.encode().expect("fits"));
        for bytes in cases {
            assert_eq!(
                Request::decode(&bytes),
                Err(WireError::Malformed),
                "{bytes:?}"
            );
        }
    }
}
