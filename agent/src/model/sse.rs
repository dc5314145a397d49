//! Server-sent events parsing (stub).
