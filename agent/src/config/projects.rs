//! `[[projects]]`: named groups of chat channels with a connector selection, the project tier
//! of connector policy (see [`crate::connectors`]).

use serde::{Deserialize, Serialize};

/// One `[[projects]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProjectConfig {
    /// The project's name (for people and logs).
    pub name: String,
    /// Channel keys it groups: `discord:<channel id>`, `slack:<team>:<channel>`.
    pub channels: Vec<String>,
    /// MCP servers its threads may use; absent = the project says nothing, `[]` = none.
    pub connectors: Option<Vec<String>>,
}

/// The project tier for `channel`: the intersection of every project that lists it and
/// declares connectors (`None` when none does).
pub fn project_connectors(projects: &[ProjectConfig], channel: &str) -> Option<Vec<String>> {
    let mut declared = projects
        .iter()
        .filter(|p| p.channels.iter().any(|c| c == channel))
        .filter_map(|p| p.connectors.clone());
    let first = declared.next()?;
    let mut set: std::collections::BTreeSet<String> = first.into_iter().collect();
    for more in declared {
        set.retain(|s| more.contains(s));
    }
    Some(set.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn project(channels: &[&str], connectors: Option<&[&str]>) -> ProjectConfig {
        ProjectConfig {
            name: "p".into(),
            channels: channels.iter().map(|s| (*s).to_owned()).collect(),
            connectors: connectors.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn a_channel_in_several_projects_gets_what_all_of_them_allow() {
        let projects = [
            project(&["discord:1", "discord:2"], Some(&["github", "jira"])),
            project(&["discord:2"], Some(&["jira", "mail"])),
            project(&["discord:3"], None),
        ];
        assert_eq!(
            project_connectors(&projects, "discord:1"),
            Some(vec!["github".into(), "jira".into()])
        );
        assert_eq!(
            project_connectors(&projects, "discord:2"),
            Some(vec!["jira".into()])
        );
        assert_eq!(project_connectors(&projects, "discord:3"), None);
        assert_eq!(project_connectors(&projects, "discord:9"), None);
    }

    #[test]
    fn projects_and_auth_parse_from_toml() {
        let text = r#"
            [auth]
            jwt_secret_env = "ADMIN_JWT"

            [[projects]]
            name = "payments"
            channels = ["discord:1", "slack:T1:C2"]
            connectors = ["github"]

            [[projects]]
            name = "open"
            channels = ["discord:3"]
        "#;
        let config = crate::Config::from_toml(text, std::path::Path::new("t.toml")).unwrap();
        assert_eq!(config.auth.effective_secret_env(), "ADMIN_JWT");
        assert_eq!(
            config.projects,
            vec![
                project(&["discord:1", "slack:T1:C2"], Some(&["github"])),
                project(&["discord:3"], None),
            ]
            .into_iter()
            .zip(["payments", "open"])
            .map(|(p, name)| ProjectConfig {
                name: name.into(),
                ..p
            })
            .collect::<Vec<_>>()
        );
        assert_eq!(
            crate::Config::default().auth.effective_secret_env(),
            "SANDPIPER_JWT_SECRET"
        );
    }
}
