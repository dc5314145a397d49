//! Which environment variable overrides which key of the config file, in one table, and which
//! of them override a value the file actually sets.
//!
//! A variable wins over the file (see the module docs of [`crate::config`]). That is what an
//! operator wants for a one-off, but a default baked into a container image or a systemd unit
//! then silently beats the mounted file: an image that set `SANDPIPER_DATABASE_URL` ran every
//! node on its own SQLite although the file named PostgreSQL. So the binary warns at start for
//! each variable of [`ENV_OVERRIDES`] that replaces a different value the file sets — naming
//! the variable and the key, never the values (a URL may hold a password).

use super::{ConfigSource, Env};

/// An environment variable that replaces a key of the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvOverride {
    /// The variable, e.g. `SANDPIPER_DATABASE_URL`.
    pub var: &'static str,
    /// The dotted key of the file it replaces, e.g. `database.url`.
    pub key: &'static str,
}

const fn over(var: &'static str, key: &'static str) -> EnvOverride {
    EnvOverride { var, key }
}

/// Every variable that replaces a key of the file, whichever crate reads it (the agent's
/// sections, `[discord]`/`[slack]` of the channels, `[log]` of the binary). A test checks
/// that every `SANDPIPER_*` variable those readers take is here or is no key's override.
pub const ENV_OVERRIDES: &[EnvOverride] = &[
    over("SANDPIPER_DATABASE_URL", "database.url"),
    over("SANDPIPER_MODEL_PROVIDER", "model.provider"),
    over("SANDPIPER_MODEL_BASE_URL", "model.base_url"),
    over("SANDPIPER_MODEL", "model.model"),
    over("SANDPIPER_MODEL_CONTEXT_WINDOW", "model.context_window"),
    over("SANDPIPER_LISTEN", "server.listen"),
    over("SANDPIPER_OPS_LISTEN", "server.ops_listen"),
    over("SANDPIPER_ADVERTISE_URL", "server.advertise_url"),
    over("SANDPIPER_PUBLIC_URL", "server.public_url"),
    over("SANDPIPER_WEB_ALLOW_PRIVATE", "web.allow_private"),
    over("SANDPIPER_WEB_SEARCH_BASE_URL", "web.search_base_url"),
    over("SANDPIPER_LOG_FORMAT", "log.format"),
    over("SANDPIPER_DISCORD_SHARDS", "discord.shards"),
    over("SANDPIPER_DISCORD_API_BASE", "discord.api_base_url"),
    over("SANDPIPER_SLACK_API_BASE", "slack.api_base_url"),
];

/// The overrides in effect for the TOML `text`: each variable of [`ENV_OVERRIDES`] that `env`
/// sets while the file sets its key to something else. A string equal to the variable's value
/// is no override (an image's default repeated in the file); other types always count, as
/// their spelling in the file and in a variable differ.
pub fn env_overrides(text: &str, env: &dyn Env) -> Vec<EnvOverride> {
    let Ok(file) = toml::from_str::<toml::Table>(text) else {
        return Vec::new();
    };
    ENV_OVERRIDES
        .iter()
        .filter(|o| {
            let (Some(value), Some(set)) = (env.var(o.var), lookup(&file, o.key)) else {
                return false;
            };
            set.as_str() != Some(value.as_str())
        })
        .copied()
        .collect()
}

/// The value at dotted `key` of `table`.
fn lookup<'t>(table: &'t toml::Table, key: &str) -> Option<&'t toml::Value> {
    let (section, name) = key.split_once('.')?;
    table.get(section)?.as_table()?.get(name)
}

impl ConfigSource {
    /// [`env_overrides`] of this file (none without a file, or when it cannot be read: the
    /// load reports that).
    pub fn env_overrides(&self, env: &dyn Env) -> Vec<EnvOverride> {
        match self {
            ConfigSource::File(path) => std::fs::read_to_string(path)
                .map(|text| env_overrides(&text, env))
                .unwrap_or_default(),
            ConfigSource::Defaults => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const FILE: &str = r#"
[database]
url = "postgres://sp:hunter2@db/sp"
[server]
listen = "0.0.0.0:8090"
[log]
format = "text"
[discord]
shards = "0/2"
"#;

    #[test]
    fn a_variable_overrides_a_key_the_file_sets_to_something_else() {
        let env = [
            (
                "SANDPIPER_DATABASE_URL",
                "sqlite:///var/lib/sandpiper/sandpiper.db",
            ),
            // The same value as the file's: nothing is overridden.
            ("SANDPIPER_LISTEN", "0.0.0.0:8090"),
            ("SANDPIPER_LOG_FORMAT", "json"),
            ("SANDPIPER_DISCORD_SHARDS", "1/2"),
            // The file does not set it: the variable fills a default, no warning.
            ("SANDPIPER_MODEL", "qwen"),
        ];
        assert_eq!(
            env_overrides(FILE, &env),
            vec![
                over("SANDPIPER_DATABASE_URL", "database.url"),
                over("SANDPIPER_LOG_FORMAT", "log.format"),
                over("SANDPIPER_DISCORD_SHARDS", "discord.shards"),
            ]
        );
        assert_eq!(env_overrides(FILE, &[("HOME", "/x")]), vec![]);
        assert_eq!(env_overrides("not = [toml", &env), vec![]);
    }

    /// Every `SANDPIPER_*` variable the readers of the file take is in the table, or is one
    /// that replaces no key (a secret's default variable, the file's own path, the filter).
    #[test]
    fn the_table_names_every_variable_the_readers_take() {
        const READERS: &[&str] = &[
            include_str!("../config.rs"),
            include_str!("server.rs"),
            include_str!("web.rs"),
            include_str!("log.rs"),
            include_str!("../../../channels/src/config.rs"),
            include_str!("../../../bot/src/logging.rs"),
        ];
        const NO_KEY: &[&str] = &[
            "SANDPIPER_CONFIG",
            "SANDPIPER_LOG",
            "SANDPIPER_OPS_TOKEN",
            "SANDPIPER_JWT_SECRET",
        ];
        let mut missing: Vec<String> = READERS
            .iter()
            .flat_map(|source| source.split('"').skip(1).step_by(2))
            .filter(|s| {
                s.starts_with("SANDPIPER_") && s.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            })
            .filter(|var| !NO_KEY.contains(var) && !ENV_OVERRIDES.iter().any(|o| o.var == *var))
            .map(str::to_owned)
            .collect();
        missing.sort();
        missing.dedup();
        assert_eq!(missing, Vec::<String>::new(), "add them to ENV_OVERRIDES");
    }
}
