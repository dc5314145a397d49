//! The launcher of confined tool processes, and nothing else: `sandpiper` starts a tool as
//! this small binary with the confinement plan in its arguments; it confines itself and
//! execs the tool. Starting it costs a fraction of starting the whole bot binary for the
//! same job (see `sandpiper_agent::process::confine::launcher`). Not meant to be run by hand.

fn main() {
    sandpiper_agent::process::confine::launcher::small_main()
}
