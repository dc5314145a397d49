//! Service JWTs as the HTTP endpoints check them: the implementation lives in
//! [`sandpiper_agent::service_jwt`], where the notify tool signs its tokens with it.

pub use sandpiper_agent::service_jwt::*;
