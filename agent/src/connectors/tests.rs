use super::*;
use pretty_assertions::assert_eq;

fn ids(list: &[&str]) -> Option<Vec<String>> {
    Some(list.iter().map(|s| (*s).to_owned()).collect())
}

fn set(list: &[&str]) -> Option<BTreeSet<String>> {
    Some(list.iter().map(|s| (*s).to_owned()).collect())
}

#[test]
fn nothing_declared_is_unrestricted() {
    assert_eq!(resolve(&Tiers::default()), Effective::unrestricted());
    assert!(is_tool_allowed(
        "mcp__github__create_issue",
        &Effective::unrestricted()
    ));
}

#[test]
fn an_empty_list_allows_nothing_and_is_not_widened_by_another_tier() {
    let e = resolve(&Tiers {
        task: ids(&[]),
        workstream: ids(&["mail", "github"]),
        ..Tiers::default()
    });
    assert_eq!(
        e,
        Effective {
            allowed: set(&[]),
            source: Tier::Task,
            declared: vec![Tier::Task, Tier::Workstream],
        }
    );
    // The server exists and the thread allows it; the task's [] still refuses it.
    assert!(!is_tool_allowed("mcp__mail__send", &e));
    assert_eq!(e.describe(), "none");
}

#[test]
fn none_and_empty_differ_at_every_tier() {
    fn slot(t: &mut Tiers, tier: usize) -> &mut Option<Vec<String>> {
        match tier {
            0 => &mut t.task,
            1 => &mut t.workstream,
            2 => &mut t.channel,
            _ => &mut t.project,
        }
    }
    for tier in 0..4 {
        let silent = Tiers::default();
        let mut empty = Tiers::default();
        *slot(&mut empty, tier) = ids(&[]);
        assert_eq!(resolve(&silent).allowed, None, "tier {tier}");
        assert_eq!(resolve(&empty).allowed, set(&[]), "tier {tier}");
    }
}

#[test]
fn a_thread_cannot_re_enable_what_its_channel_banned() {
    let e = resolve(&Tiers {
        workstream: ids(&["github", "mail"]),
        channel: ids(&["github"]),
        ..Tiers::default()
    });
    assert_eq!(e.allowed, set(&["github"]));
    assert_eq!(e.source, Tier::Workstream);
    assert_eq!(e.declared, vec![Tier::Workstream, Tier::Channel]);
    assert!(is_tool_allowed("mcp__github__x", &e));
    assert!(!is_tool_allowed("mcp__mail__x", &e));
}

/// Every combination of the four tiers, each one of: silent, `[]`, `[a]`, `[a, b]`, `[b, c]`,
/// checked against the definition (a server is allowed iff every declared tier lists it).
#[test]
fn every_combination_of_tiers_is_the_intersection_of_the_declared_ones() {
    let choices: [Option<&[&str]>; 5] = [
        None,
        Some(&[]),
        Some(&["a"]),
        Some(&["a", "b"]),
        Some(&["b", "c"]),
    ];
    let universe = ["a", "b", "c", "d"];
    let mut checked = 0;
    for t in choices {
        for w in choices {
            for c in choices {
                for p in choices {
                    let tiers = Tiers {
                        task: t.map(|l| ids(l).unwrap_or_default()),
                        workstream: w.map(|l| ids(l).unwrap_or_default()),
                        channel: c.map(|l| ids(l).unwrap_or_default()),
                        project: p.map(|l| ids(l).unwrap_or_default()),
                    };
                    let e = resolve(&tiers);
                    let declared: Vec<(Tier, &[&str])> = [
                        (Tier::Task, t),
                        (Tier::Workstream, w),
                        (Tier::Channel, c),
                        (Tier::Project, p),
                    ]
                    .into_iter()
                    .filter_map(|(tier, l)| l.map(|l| (tier, l)))
                    .collect();
                    let expected_source = declared.first().map_or(Tier::All, |d| d.0);
                    assert_eq!(e.source, expected_source, "{tiers:?}");
                    assert_eq!(
                        e.declared,
                        declared.iter().map(|d| d.0).collect::<Vec<_>>(),
                        "{tiers:?}"
                    );
                    assert_eq!(e.is_restricted(), !declared.is_empty(), "{tiers:?}");
                    for server in universe {
                        let expected = declared.iter().all(|(_, l)| l.contains(&server));
                        let name = format!("mcp__{server}__tool");
                        assert_eq!(is_tool_allowed(&name, &e), expected, "{server} {tiers:?}");
                        assert_eq!(e.allows_server(server), expected, "{server} {tiers:?}");
                    }
                    // Built-ins pass whatever the tiers say.
                    assert!(is_tool_allowed("bash", &e));
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 625);
}

#[test]
fn names_split_on_the_first_two_separators() {
    assert_eq!(server_of("mcp__github__create_issue"), Some("github"));
    assert_eq!(server_of("mcp__browser__tab__click"), Some("browser"));
    assert_eq!(server_of("mcp__a-b__x"), Some("a-b"));
    // Malformed or not MCP at all: no server.
    for name in [
        "bash",
        "read_resource",
        "mcp__",
        "mcp__github",
        "mcp__github__",
        "mcp____tool",
        "mcp_github__x",
        "MCP__github__x",
        "",
    ] {
        assert_eq!(server_of(name), None, "{name}");
    }
}

#[test]
fn a_tool_name_with_separators_is_gated_by_its_server_only() {
    let e = resolve(&Tiers {
        workstream: ids(&["browser"]),
        ..Tiers::default()
    });
    assert!(is_tool_allowed("mcp__browser__tab__click", &e));
    // `tab` is a tool-name part here, not a server.
    let e = resolve(&Tiers {
        workstream: ids(&["tab"]),
        ..Tiers::default()
    });
    assert!(!is_tool_allowed("mcp__browser__tab__click", &e));
}

#[test]
fn built_ins_and_malformed_names_pass_even_when_nothing_is_allowed() {
    let e = resolve(&Tiers {
        task: ids(&[]),
        ..Tiers::default()
    });
    for name in [
        "bash",
        "read_file",
        "mcp__",
        "mcp__x",
        "mcp____y",
        "tool_search",
    ] {
        assert!(is_tool_allowed(name, &e), "{name}");
    }
    assert!(!is_tool_allowed("mcp__x__y", &e));
}

#[test]
fn lists_are_trimmed_and_deduplicated() {
    assert_eq!(
        parse_list(" github, jira ,,github  mail"),
        vec!["github".to_owned(), "jira".into(), "mail".into()]
    );
    assert_eq!(parse_list("  "), Vec::<String>::new());
    let e = resolve(&Tiers {
        channel: ids(&[" github "]),
        ..Tiers::default()
    });
    assert_eq!(e.allowed, set(&["github"]));
    assert_eq!(e.describe(), "github");
}

#[test]
fn slack_keys_name_their_channel_discord_keys_do_not() {
    assert_eq!(
        channel_from_key("slack:T1:C2:1700000000.000100"),
        Some("slack:T1:C2".into())
    );
    assert_eq!(channel_from_key("slack:T1:C2"), None);
    assert_eq!(channel_from_key("discord:123"), None);
    assert_eq!(channel_from_key("console:default"), None);
}

#[test]
fn the_refusal_names_the_server() {
    assert_eq!(
        refusal("mail"),
        "Connector mail is not enabled for this task"
    );
}

#[tokio::test]
async fn a_scope_reads_the_stored_tiers_and_the_project_of_the_channel() {
    let store = Store::memory().await.unwrap();
    store
        .ensure_workstream_in("discord:100", Some("alice"), Some("discord:10"))
        .await
        .unwrap();
    store
        .set_workstream_connectors("discord:100", ids(&["github", "jira", "mail"]).as_deref())
        .await
        .unwrap();
    store
        .set_channel_connectors("discord:10", ids(&["github", "jira"]).as_deref(), None)
        .await
        .unwrap();
    let scope = ConnectorScope {
        task: None,
        projects: Arc::new(vec![ProjectConfig {
            name: "payments".into(),
            channels: vec!["discord:10".into()],
            connectors: ids(&["jira"]),
        }]),
    };
    let view = scope.view(&store, "discord:100").await.unwrap();
    assert_eq!(view.effective.allowed, set(&["jira"]));
    assert_eq!(
        view.effective.declared,
        vec![Tier::Workstream, Tier::Channel, Tier::Project]
    );
    assert_eq!(view.channel.as_deref(), Some("discord:10"));
    // The channel's own view: its tier and its project, no thread.
    let channel = scope.channel_view(&store, "discord:10").await.unwrap();
    assert_eq!(channel.effective.allowed, set(&["jira"]));
    assert_eq!(channel.effective.source, Tier::Channel);
    // A task narrows further; an unknown workstream has only the task tier.
    let task = ConnectorScope {
        task: ids(&[]),
        ..scope
    };
    assert_eq!(
        task.effective(&store, "discord:100").await.unwrap().allowed,
        set(&[])
    );
    let unknown = task.view(&store, "discord:404").await.unwrap();
    assert!(!unknown.exists);
    assert_eq!(unknown.effective.source, Tier::Task);
}
