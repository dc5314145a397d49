use super::*;
use pretty_assertions::assert_eq;

#[test]
fn defaults_need_no_file() {
    let env: [(&str, &str); 0] = [];
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    // An explicit file that does not exist is an error, not a silent default.
    let err = Config::load(Some(&missing), &env).unwrap_err();
    assert!(err.to_string().contains("absent.toml"), "{err}");
    let c = Config::default();
    assert_eq!(c.database.url, "sqlite://sandpiper.db");
    assert_eq!(c.agent.max_rounds, 50);
    assert_eq!(c.tools.bash_timeout, Duration::from_secs(120));
}

#[test]
fn unknown_key_names_key_and_file() {
    let err = Config::from_toml("[model]\nmodle = \"x\"\n", Path::new("/etc/sp.toml")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("/etc/sp.toml"), "{msg}");
    assert!(msg.contains("modle"), "{msg}");
}

#[test]
fn bad_value_names_key_and_file() {
    let err =
        Config::from_toml("[approval]\ntimeout = \"soon\"\n", Path::new("a.toml")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("a.toml") && msg.contains("timeout") && msg.contains("soon"),
        "{msg}"
    );
}

#[test]
fn env_overrides_apply_last_and_key_is_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[model]\nprovider = \"openai\"\nmodel = \"file-model\"\napi_key_env = \"MY_KEY\"\n[approval]\ntimeout = \"5m\"\n",
    )
    .unwrap();
    let env = [
        ("SANDPIPER_MODEL", "env-model"),
        ("SANDPIPER_MODEL_BASE_URL", "http://127.0.0.1:9/v1"),
        ("SANDPIPER_DATABASE_URL", "postgres://localhost/test"),
        ("MY_KEY", "sk-very-secret"),
    ];
    let (c, source) = Config::load(Some(&path), &env).unwrap();
    assert_eq!(source, ConfigSource::File(path.clone()));
    assert_eq!(c.model.model, "env-model");
    assert_eq!(c.model.effective_base_url(), "http://127.0.0.1:9/v1");
    assert_eq!(c.database.url, "postgres://localhost/test");
    assert_eq!(c.approval.timeout, Duration::from_secs(300));
    assert_eq!(
        c.model.api_key.as_ref().map(Secret::expose),
        Some("sk-very-secret")
    );
    let shown = c.to_redacted_toml();
    assert!(!shown.contains("sk-very-secret"), "{shown}");
    assert!(!format!("{c:?}").contains("sk-very-secret"));
}

#[test]
fn anthropic_defaults_follow_provider() {
    let env = [
        ("SANDPIPER_MODEL_PROVIDER", "anthropic"),
        ("ANTHROPIC_API_KEY", "k"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "").unwrap();
    let (c, _) = Config::load(Some(&path), &env).unwrap();
    assert_eq!(c.model.provider, Provider::Anthropic);
    assert_eq!(c.model.effective_base_url(), "https://api.anthropic.com");
    assert!(c.model.api_key.is_some());
    let bad = [("SANDPIPER_MODEL_PROVIDER", "gemini")];
    let err = Config::load(Some(&path), &bad).unwrap_err().to_string();
    assert!(
        err.contains("SANDPIPER_MODEL_PROVIDER") && err.contains("gemini"),
        "{err}"
    );
}

#[test]
fn tool_search_settings_parse_with_defaults() {
    let c = Config::default();
    assert_eq!(
        (
            c.tools.search,
            c.tools.search_threshold,
            c.tools.search_max_results,
            c.model.capabilities.native_tool_search
        ),
        (ToolSearchMode::Auto, 20, 5, false)
    );
    let text = "[tools]\nsearch = \"off\"\nsearch_threshold = 3\nsearch_max_results = 7\n\
                [model.capabilities]\nnative_tool_search = true\n";
    let c = Config::from_toml(text, Path::new("t.toml")).unwrap();
    assert_eq!(
        (
            c.tools.search,
            c.tools.search_threshold,
            c.tools.search_max_results,
            c.model.capabilities.native_tool_search
        ),
        (ToolSearchMode::Off, 3, 7, true)
    );
    let err = Config::from_toml("[tools]\nsearch = \"maybe\"\n", Path::new("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("search") && err.contains("maybe"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[tools]\nsearch_max_results = 0\n").unwrap();
    let env: [(&str, &str); 0] = [];
    let err = Config::load(Some(&path), &env).unwrap_err().to_string();
    assert!(err.contains("tools.search_max_results"), "{err}");
    assert_eq!("on".parse::<ToolSearchMode>(), Ok(ToolSearchMode::On));
    assert!("yes".parse::<ToolSearchMode>().is_err());
}

#[test]
fn mcp_servers_parse_and_their_secrets_are_redacted() {
    let c = Config::from_toml(
        "[mcp]\ncall_timeout = \"10s\"\n[mcp.servers.gh]\ncommand = \"npx\"\nargs = [\"-y\", \"gh\"]\n\
         [mcp.servers.gh.env]\nGITHUB_TOKEN = \"ghp_secret\"\n\
         [mcp.servers.remote]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n\
         [mcp.servers.remote.headers]\nAuthorization = \"Bearer tok_secret\"\n",
        Path::new("c.toml"),
    )
    .unwrap();
    assert_eq!(c.mcp.servers.len(), 2);
    assert_eq!(c.mcp.call_timeout, Duration::from_secs(10));
    let shown = c.to_redacted_toml();
    assert!(
        !shown.contains("ghp_secret") && !shown.contains("tok_secret"),
        "{shown}"
    );
    assert!(shown.contains("GITHUB_TOKEN"), "{shown}");
}

#[test]
fn an_mcp_json_file_adds_servers_and_a_clash_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mcp.json");
    std::fs::write(
        &json,
        r#"{"mcpServers": {"time": {"command": "mcp-server-time"}, "web": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}"#,
    )
    .unwrap();
    let mut c = Config::default();
    c.mcp.merge_json_file(&json).unwrap();
    assert_eq!(c.mcp.servers.keys().collect::<Vec<_>>(), ["time", "web"]);
    let err = c.mcp.merge_json_file(&json).unwrap_err().to_string();
    assert!(
        err.contains("mcp.servers.time") && err.contains("mcp.json"),
        "{err}"
    );
    std::fs::write(&json, "{not json").unwrap();
    let err = Config::default()
        .mcp
        .merge_json_file(&json)
        .unwrap_err()
        .to_string();
    assert!(err.contains("mcp.json"), "{err}");
}

#[test]
fn durations_parse() {
    assert_eq!(duration::parse("90"), Some(Duration::from_secs(90)));
    assert_eq!(duration::parse("4h"), Some(Duration::from_secs(14400)));
    assert_eq!(duration::parse("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(duration::parse("x"), None);
}

#[test]
fn the_example_file_parses_and_says_what_the_defaults_are() {
    let text = include_str!("../../../sandpiper.example.toml");
    let parsed = Config::from_toml(text, Path::new("sandpiper.example.toml")).unwrap();
    let defaults = Config::default();
    assert_eq!(
        parsed.database.acquire_timeout,
        defaults.database.acquire_timeout
    );
    assert_eq!(parsed.tools.deny_read, defaults.tools.deny_read);
    assert_eq!(parsed.tools.workdir_mode, defaults.tools.workdir_mode);
    assert_eq!(
        parsed.server.header_read_timeout,
        defaults.server.header_read_timeout
    );
    assert_eq!(parsed.server.max_body_bytes, defaults.server.max_body_bytes);
    assert_eq!(
        parsed.server.max_connections,
        defaults.server.max_connections
    );
    assert_eq!(
        parsed.agent.max_concurrent_turns,
        defaults.agent.max_concurrent_turns
    );
    assert_eq!(
        parsed.agent.max_turns_per_user,
        defaults.agent.max_turns_per_user
    );
}

#[test]
fn the_default_database_is_in_the_data_directory_unless_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "[model]\nmodel = \"m\"\n").unwrap();
    let url = |env: &dyn Env| Config::load(Some(&empty), env).unwrap().0.database.url;
    assert_eq!(
        url(&[("HOME", "/home/ann")]),
        "sqlite:///home/ann/.local/share/sandpiper/sandpiper.db"
    );
    assert_eq!(
        url(&[("HOME", "/home/ann"), ("XDG_DATA_HOME", "/data")]),
        "sqlite:///data/sandpiper/sandpiper.db"
    );
    // A relative XDG_DATA_HOME is invalid by the spec and ignored.
    assert_eq!(
        url(&[("HOME", "/home/ann"), ("XDG_DATA_HOME", "rel")]),
        "sqlite:///home/ann/.local/share/sandpiper/sandpiper.db"
    );
    assert_eq!(
        url(&[
            ("HOME", "/home/ann"),
            ("SANDPIPER_DATABASE_URL", "postgres://h/db")
        ]),
        "postgres://h/db"
    );
    // Without a home there is no data directory: the old default, beside the file.
    let none: [(&str, &str); 0] = [];
    let beside = |file: &str| format!("sqlite://{}", dir.path().join(file).display());
    assert_eq!(url(&none), beside("sandpiper.db"));
    // A relative file is relative to the config file, wherever the command runs.
    let named = dir.path().join("named.toml");
    std::fs::write(&named, "[database]\nurl = \"sqlite://here.db\"\n").unwrap();
    let (c, _) = Config::load(Some(&named), &[("HOME", "/home/ann")]).unwrap();
    assert_eq!(c.database.url, beside("here.db"));
}

#[test]
fn a_bad_value_names_its_source_and_what_was_expected() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.toml");
    std::fs::write(&file, "[model]\nmodel = \"m\"\n").unwrap();
    let err = Config::load(Some(&file), &[("SANDPIPER_MODEL_BASE_URL", "ftp://x")])
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "invalid config value `model.base_url` (from SANDPIPER_MODEL_BASE_URL): `ftp://x` is not \
         an http(s) URL such as http://127.0.0.1:11434/v1"
    );
    std::fs::write(&file, "[server]\nlisten = 8090\n").unwrap();
    let none: [(&str, &str); 0] = [];
    let err = Config::load(Some(&file), &none).unwrap_err().to_string();
    assert!(
        err.contains("s.toml") && err.ends_with("(expected host:port such as 127.0.0.1:8090)"),
        "{err}"
    );
}

#[test]
fn redaction_covers_tool_variables_and_mcp_url_credentials() {
    let text = "[tools.env]\nGITHUB_TOKEN = \"ghp-1\"\n\
                [mcp.servers.r]\nurl = \"https://u:pw@h/mcp?api_key=k1\"\n";
    let c = Config::from_toml(text, Path::new("x.toml")).unwrap();
    let shown = c.to_redacted_toml();
    assert!(shown.contains("GITHUB_TOKEN = \"<redacted>\""), "{shown}");
    assert!(
        shown.contains("url = \"https://<redacted>@h/mcp?api_key=<redacted>\""),
        "{shown}"
    );
    assert!(
        !shown.contains("ghp-1") && !shown.contains("pw@") && !shown.contains("k1"),
        "{shown}"
    );
}

#[test]
fn a_request_path_goes_before_the_base_urls_query() {
    assert_eq!(
        super::with_path(
            "https://gw.example/openai/d/x?api-version=2024-10-21",
            "/chat/completions"
        ),
        "https://gw.example/openai/d/x/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(
        super::with_path("http://127.0.0.1:8080/v1/", "/models"),
        "http://127.0.0.1:8080/v1/models"
    );
}
