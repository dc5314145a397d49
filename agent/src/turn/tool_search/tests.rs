use super::*;
use crate::model::ToolCall;
use pretty_assertions::assert_eq;

fn schema(name: &str, description: &str) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: description.into(),
        parameters: json!({"type": "object"}).into(),
        defer_loading: false,
    }
}

fn builtins() -> Vec<ToolSchema> {
    vec![
        schema("bash", "Runs a shell command."),
        schema("read_file", "Reads a file."),
    ]
}

fn external() -> Vec<ToolSchema> {
    vec![
        schema(
            "mcp__github__create_issue",
            "Create a new issue in a GitHub repository.\nNeeds a title.",
        ),
        schema(
            "mcp__github__list_repos",
            "List repositories of a GitHub user or organisation.",
        ),
        schema(
            "mcp__jira__create_ticket",
            "Create a Jira ticket in a project.",
        ),
    ]
}

fn names(tools: &[ToolSchema]) -> Vec<(&str, bool)> {
    tools
        .iter()
        .map(|t| (t.name.as_str(), t.defer_loading))
        .collect()
}

#[test]
fn activation_follows_mode_and_threshold() {
    assert!(!is_active(ToolSearchMode::Auto, 19, 20));
    assert!(is_active(ToolSearchMode::Auto, 20, 20));
    assert!(is_active(ToolSearchMode::On, 1, 20));
    assert!(!is_active(ToolSearchMode::Off, 1000, 20));
}

#[test]
fn inactive_search_offers_everything_as_is() {
    let catalog = ToolCatalog::new(&builtins(), external());
    let expanded = Expanded::default();
    let offered = catalog.view(&expanded, false, false).offered();
    assert_eq!(offered, [builtins(), external()].concat());
}

#[test]
fn client_side_search_hides_deferred_tools_behind_tool_search() {
    let catalog = ToolCatalog::new(&builtins(), external());
    let mut expanded = Expanded::default();
    let view = catalog.view(&expanded, true, false);
    assert_eq!(
        names(&view.offered()),
        [("bash", false), ("read_file", false), (TOOL_SEARCH, false)]
    );
    assert_eq!(view.offered().last(), Some(&tool_search_schema()));
    expanded.insert("mcp__jira__create_ticket".to_owned());
    assert_eq!(
        names(&catalog.view(&expanded, true, false).offered()),
        [
            ("bash", false),
            ("read_file", false),
            (TOOL_SEARCH, false),
            ("mcp__jira__create_ticket", false),
        ]
    );
    // Everything expanded: nothing left to search for; what was found keeps its place.
    expanded.extend(external().into_iter().map(|t| t.name));
    let all = catalog.view(&expanded, true, false).offered();
    let jira_first = external()
        .into_iter()
        .filter(|t| t.name == "mcp__jira__create_ticket")
        .chain(
            external()
                .into_iter()
                .filter(|t| t.name != "mcp__jira__create_ticket"),
        );
    assert_eq!(all, [builtins(), jira_first.collect()].concat());
}

#[test]
fn a_found_tool_is_appended_and_the_list_keeps_its_prefix() {
    let catalog = ToolCatalog::new(&builtins(), external());
    let mut expanded = Expanded::default();
    let mut before = catalog.view(&expanded, true, false).offered();
    // Found in the opposite of catalog order: each list starts with the one before it.
    let mut found: Vec<String> = external().into_iter().map(|t| t.name).collect();
    found.reverse();
    for name in found.into_iter().take(external().len() - 1) {
        expanded.insert(name.clone());
        let after = catalog.view(&expanded, true, false).offered();
        assert_eq!(after[..before.len()], before[..], "after finding {name}");
        assert_eq!(after.last().map(|t| t.name.as_str()), Some(name.as_str()));
        before = after;
    }
}

#[test]
fn native_search_flags_deferred_tools_and_adds_no_tool_search() {
    let catalog = ToolCatalog::new(&builtins(), external());
    let expanded = Expanded::from(["mcp__github__list_repos".to_owned()]);
    assert_eq!(
        names(&catalog.view(&expanded, true, true).offered()),
        [
            ("bash", false),
            ("read_file", false),
            ("mcp__github__create_issue", true),
            ("mcp__github__list_repos", false),
            ("mcp__jira__create_ticket", true)
        ]
    );
}

#[test]
fn nothing_deferrable_means_no_tool_search() {
    let catalog = ToolCatalog::new(&builtins(), Vec::new());
    let expanded = Expanded::default();
    assert_eq!(catalog.view(&expanded, true, false).offered(), builtins());
    assert!(catalog.index().is_empty());
}

#[test]
fn external_tools_cannot_shadow_builtins_or_tool_search() {
    let mut ext = external();
    ext.push(schema("bash", "An impostor."));
    ext.push(schema(TOOL_SEARCH, "Another impostor."));
    ext.push(schema("mcp__jira__create_ticket", "A duplicate."));
    let catalog = ToolCatalog::new(&builtins(), ext);
    assert_eq!(catalog.tools(), [builtins(), external()].concat());
    assert_eq!(catalog.index().len(), 3);
}

#[test]
fn bm25_ranks_github_issue_tools_first() {
    let index = ToolSearchIndex::build(&external());
    assert_eq!(
        index.search("create github issue", 5),
        // Both others match two of the three words; the Jira tool says "create" twice.
        [
            "mcp__github__create_issue",
            "mcp__jira__create_ticket",
            "mcp__github__list_repos"
        ]
    );
    assert_eq!(
        index.search("create github issue", 1),
        ["mcp__github__create_issue"]
    );
    assert_eq!(index.search("jira", 5), ["mcp__jira__create_ticket"]);
    assert_eq!(index.search("kubernetes", 5), Vec::<String>::new());
}

#[test]
fn a_search_lists_the_tools_it_makes_callable() {
    let index = ToolSearchIndex::build(&external());
    let found = run_tool_search(&index, r#"{"query": "github issue", "max_results": 1}"#, 5);
    assert_eq!(
        found,
        ToolSearchOutcome {
            query: "github issue".into(),
            text: "Found 1 tool for \"github issue\"; you can call it from now on:\n\
                   - mcp__github__create_issue: Create a new issue in a GitHub repository.\n"
                .into(),
            is_error: false,
            expand: vec!["mcp__github__create_issue".into()],
        }
    );
    // The model cannot ask for more than the configured cap; a bare string is the query.
    let capped = run_tool_search(&index, r#"{"query": "create", "max_results": 50}"#, 1);
    assert_eq!(capped.expand.len(), 1);
    let bare = run_tool_search(&index, "jira ticket", 5);
    assert_eq!(bare.expand, ["mcp__jira__create_ticket"]);
}

#[test]
fn no_match_and_no_query_are_explained() {
    let index = ToolSearchIndex::build(&external());
    let none = run_tool_search(&index, r#"{"query": "kubernetes pods"}"#, 5);
    assert_eq!(
        (none.is_error, none.expand.len()),
        (false, 0),
        "{}",
        none.text
    );
    assert!(
        none.text
            .starts_with("No tools match \"kubernetes pods\". Try other keywords")
    );
    let missing = run_tool_search(&index, "{}", 5);
    assert!(missing.is_error);
    assert!(missing.text.contains("needs a `query`"), "{}", missing.text);
}

#[test]
fn expansions_are_replayed_from_history() {
    let index = ToolSearchIndex::build(&external());
    let call = |id: &str, name: &str, arguments: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    };
    let mut a = Message::assistant("");
    a.tool_calls = vec![
        call(
            "1",
            TOOL_SEARCH,
            r#"{"query": "github issue", "max_results": 1}"#,
        ),
        call("2", "mcp__jira__create_ticket", "{}"),
        call("3", "bash", r#"{"command": "ls"}"#),
    ];
    let history = [Message::user("hi"), a];
    let replayed = replay_expansions(&history, &index, 5);
    assert_eq!(
        replayed,
        Expanded::from([
            "mcp__github__create_issue".to_owned(),
            "mcp__jira__create_ticket".to_owned()
        ])
    );
}

#[test]
fn turn_tools_apply_the_configuration() {
    let catalog = Arc::new(ToolCatalog::new(&builtins(), external()));
    let config = ToolsConfig {
        search: ToolSearchMode::On,
        ..ToolsConfig::default()
    };
    let caps = Capabilities::default();
    let tools = TurnTools::new(catalog.clone(), &config, caps, Effective::unrestricted());
    assert!(tools.client_search().is_some());
    let mut expanded = Expanded::default();
    let calls = [
        ToolCall {
            id: "1".into(),
            name: "mcp__github__list_repos".into(),
            arguments: "{}".into(),
        },
        ToolCall {
            id: "2".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        },
    ];
    tools.expand(
        &mut expanded,
        vec!["mcp__jira__create_ticket".into()],
        &calls,
    );
    assert_eq!(
        names(&tools.offered(&expanded)),
        [
            ("bash", false),
            ("read_file", false),
            (TOOL_SEARCH, false),
            ("mcp__jira__create_ticket", false),
            ("mcp__github__list_repos", false),
        ]
    );
    // Below the threshold in auto mode (5 < 20): everything, no search.
    let auto = TurnTools::new(
        catalog.clone(),
        &ToolsConfig::default(),
        caps,
        Effective::unrestricted(),
    );
    assert!(auto.client_search().is_none());
    assert_eq!(auto.offered(&Expanded::default()).len(), 5);
    let native = Capabilities {
        native_tool_search: true,
        ..caps
    };
    assert!(
        TurnTools::new(catalog.clone(), &config, native, Effective::unrestricted())
            .client_search()
            .is_none()
    );
    let no_tools = Capabilities {
        supports_tools: false,
        ..caps
    };
    let none = TurnTools::new(catalog, &config, no_tools, Effective::unrestricted());
    assert_eq!(none.offered(&expanded), Vec::new());
}

#[test]
fn connector_policy_hides_refused_servers_from_offers_and_search() {
    let catalog = Arc::new(ToolCatalog::new(&builtins(), external()));
    let policy = crate::connectors::resolve(&crate::connectors::Tiers {
        workstream: Some(vec!["jira".into()]),
        ..Default::default()
    });
    let search_on = ToolsConfig {
        search: ToolSearchMode::On,
        ..ToolsConfig::default()
    };
    let tools = TurnTools::new(
        catalog.clone(),
        &search_on,
        Capabilities::default(),
        policy.clone(),
    );
    assert!(tools.uses(&catalog));
    assert_eq!(tools.policy(), &policy);
    let search = tools.client_search().unwrap();
    // "github issue" would rank the GitHub tools first; none of them can be found.
    let found = run_tool_search(search.index, r#"{"query": "github issue"}"#, 5);
    assert!(
        found.expand.iter().all(|n| !n.starts_with("mcp__github__")),
        "{:?}",
        found.expand
    );
    assert!(!search.index.contains("mcp__github__create_issue"));
    // Even a tool the workstream expanded earlier is not offered any more.
    let expanded = Expanded::from(["mcp__github__create_issue".to_owned()]);
    let everything = TurnTools::new(
        catalog,
        &ToolsConfig::default(),
        Capabilities::default(),
        policy,
    );
    assert_eq!(
        names(&everything.offered(&expanded)),
        [
            ("bash", false),
            ("read_file", false),
            ("mcp__jira__create_ticket", false)
        ]
    );
}

#[test]
fn in_auto_mode_large_schemas_turn_search_on_whatever_their_number() {
    // Three external tools (below the count threshold of 20) whose schemas are large.
    let big = |name: &str| ToolSchema {
        parameters: json!({"type": "object", "description": "x".repeat(4_000)}).into(),
        ..schema(name, "A tool with a long schema.")
    };
    let catalog = Arc::new(ToolCatalog::new(
        &builtins(),
        vec![big("mcp__a__one"), big("mcp__a__two"), big("mcp__a__three")],
    ));
    assert!(
        catalog.external_tokens() >= 3_000,
        "{}",
        catalog.external_tokens()
    );
    let caps = Capabilities::default();
    let by_tokens = |limit: Option<u64>| {
        let config = ToolsConfig {
            search_threshold_tokens: limit,
            ..ToolsConfig::default()
        };
        TurnTools::new(catalog.clone(), &config, caps, Effective::unrestricted())
            .client_search()
            .is_some()
    };
    assert!(by_tokens(Some(2_000)), "3,000 tokens of schemas pass 2,000");
    assert!(!by_tokens(Some(8_000)), "nor the default of 8,000");
    assert!(!by_tokens(None), "only the count counts when unset");
    let off = ToolsConfig {
        search: ToolSearchMode::Off,
        search_threshold_tokens: Some(1),
        ..ToolsConfig::default()
    };
    assert!(
        TurnTools::new(catalog.clone(), &off, caps, Effective::unrestricted())
            .client_search()
            .is_none(),
        "off stays off"
    );
}
