//! The person at the terminal as a sandpiper user: `sandpiper link`, `console-link`, `whoami`,
//! `rename` and `memory`. The person is the OS account ([`defaults::os_user`]) on the console
//! platform; the answers are the chat commands' own ([`account`]), so the terminal and the
//! threads say the same thing.
//!
//! Like [`crate::init::run`], these are the binary's edge: they print, and their errors are
//! reported by `main` as they are.

use sandpiper_agent::Config;
use sandpiper_agent::config::ProcessEnv;
use sandpiper_agent::people::People;
use sandpiper_channels::commands::account;
use sandpiper_channels::console;

use crate::{defaults, wiring};

/// `sandpiper memory`'s subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum MemoryCommand {
    /// List memories (the default).
    List,
    /// Delete a memory by name.
    Delete {
        /// The memory's name.
        name: String,
        /// global, workstream or user (needed when the name exists in several).
        #[arg(long)]
        scope: Option<String>,
    },
}

/// `sandpiper link [CODE] [--unlink]`: a one-time code, or joins the account that made `code`.
pub async fn link(config: &Config, code: Option<&str>, unlink: bool) -> anyhow::Result<()> {
    let me = os_user();
    let people = People::new(wiring::open_store(config).await?);
    println!(
        "{}",
        account::link(&people, console::identity(&me), code, unlink).await?
    );
    Ok(())
}

/// `sandpiper console-link [--admin]`: a one-time sign-in link to the status page.
pub async fn console_link(config: &Config, admin: bool) -> anyhow::Result<()> {
    let me = os_user();
    let store = wiring::open_store(config).await?;
    let who = sandpiper_agent::store::web_access::WebIdentity {
        user_id: Some(account::user_id(&People::new(store.clone()), console::identity(&me)).await?),
        admin,
    };
    let link = sandpiper_agent::sign_in::make_link(&store, &config.server, &who).await?;
    println!("{}", link.message());
    Ok(())
}

/// `sandpiper whoami`: the username and linked identities (never creates the database).
pub async fn whoami(config: &Config) -> anyhow::Result<()> {
    if let Some(none) = defaults::no_database_yet(config) {
        println!("{none}");
        return Ok(());
    }
    let me = os_user();
    let people = People::new(wiring::open_existing_store(config).await?);
    println!(
        "{}",
        account::whoami(&people, console::identity(&me)).await?
    );
    Ok(())
}

/// `sandpiper rename USERNAME`.
pub async fn rename(config: &Config, username: &str) -> anyhow::Result<()> {
    let me = os_user();
    let people = People::new(wiring::open_store(config).await?);
    println!(
        "{}",
        account::rename(&people, console::identity(&me), username).await?
    );
    Ok(())
}

/// `sandpiper memory [list | delete NAME]` in console workstream `workstream` (never creates
/// the database).
pub async fn memory(
    config: &Config,
    command: Option<MemoryCommand>,
    workstream: &str,
) -> anyhow::Result<()> {
    if let Some(none) = defaults::no_database_yet(config) {
        println!("{none}");
        return Ok(());
    }
    let me = os_user();
    let people = People::new(wiring::open_existing_store(config).await?);
    let workstream = sandpiper_agent::workstream::WorkstreamKey::console(workstream).to_string();
    let text = match command.unwrap_or(MemoryCommand::List) {
        MemoryCommand::List => {
            account::memory_list(&people, console::identity(&me), &workstream).await?
        }
        MemoryCommand::Delete { name, scope } => {
            account::memory_delete(
                &people,
                console::identity(&me),
                &workstream,
                &name,
                scope.as_deref(),
                // The console runs as the operator, who holds the database anyway.
                true,
            )
            .await?
        }
    };
    println!("{}", text.trim_end());
    Ok(())
}

/// The person at the terminal: the OS user name.
fn os_user() -> String {
    defaults::os_user(&ProcessEnv)
}
