//! The tool registry: implementations joined with their embedded JSON metadata, and the tool
//! sets derived from it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::DynTool;
use super::subagent_tool::SubAgentTool;
use crate::model::ToolSchema;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/tool_schemas.rs"));
}

/// Every built-in tool, in the order they are offered to the model. The single place a tool
/// is registered.
pub fn default_tools() -> Vec<Arc<dyn DynTool>> {
    use super::*;
    vec![
        Arc::new(bash::Bash),
        Arc::new(read_file::ReadFile),
        Arc::new(write_file::WriteFile),
        Arc::new(edit_file::EditFile),
        Arc::new(search::Search),
        Arc::new(math::Math),
        Arc::new(man::Man),
        Arc::new(web_fetch::WebFetch),
        Arc::new(web_search::WebSearch),
        Arc::new(SubAgentTool(task::Task)),
        Arc::new(SubAgentTool(plan::Plan)),
        Arc::new(memory::MemoryTool),
        Arc::new(recall::Recall),
        Arc::new(notify::Notify),
        Arc::new(read_resource::ReadResource),
        Arc::new(use_prompt::UsePrompt),
        Arc::new(watch::WatchTool),
    ]
}

/// A tool's JSON file: the function schema plus sandpiper's metadata keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON schema of the arguments.
    pub parameters: Value,
    /// Available to plan sub-agents (read-only subset).
    pub agent: bool,
    /// Available to task sub-agents.
    pub task_agent: bool,
    /// Runs without asking a person by default. The source of truth for whether a call asks:
    /// a tool may raise it for one call ([`super::Prepared::ask`]), never lower it.
    pub auto_approve: bool,
    /// Parameter that a bare-string argument maps to.
    pub primary_key: Option<String>,
}

impl ToolSpec {
    /// The schema sent to the model: metadata keys stripped.
    pub fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: std::sync::Arc::new(self.parameters.clone()),
            defer_loading: false,
        }
    }
}

/// Why the registry could not be built. A start-up error and a failing test.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A JSON file is not a valid tool schema.
    #[error("tools/{file}.json is invalid: {message}")]
    BadSchema {
        /// File stem.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// Two implementations (or two files) claim one name.
    #[error("tool `{0}` is registered twice")]
    Duplicate(String),
    /// A JSON file has no implementation.
    #[error("tools/{0}.json has no implementation in default_tools()")]
    NoImplementation(String),
    /// An implementation has no JSON file.
    #[error("tool `{0}` is implemented but has no tools/{0}.json")]
    NoSchema(String),
}

/// One registered tool.
#[derive(Clone)]
pub struct RegisteredTool {
    /// Metadata from the JSON file.
    pub spec: ToolSpec,
    /// The implementation.
    pub tool: Arc<dyn DynTool>,
}

/// Built-in tools and their derived sets.
pub struct ToolRegistry {
    order: Vec<String>,
    tools: HashMap<String, RegisteredTool>,
    schemas: Vec<ToolSchema>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.order)
            .finish()
    }
}

impl ToolRegistry {
    /// The built-in tools with their embedded JSON files.
    pub fn builtin() -> Result<Self, RegistryError> {
        Self::new(default_tools(), embedded::TOOL_SCHEMAS)
    }

    /// Joins implementations with `(file stem, JSON)` pairs; both sets must match exactly.
    pub fn new(
        implementations: Vec<Arc<dyn DynTool>>,
        files: &[(&str, &str)],
    ) -> Result<Self, RegistryError> {
        let mut specs: BTreeMap<String, ToolSpec> = BTreeMap::new();
        for (file, text) in files {
            let spec: ToolSpec =
                serde_json::from_str(text).map_err(|e| RegistryError::BadSchema {
                    file: (*file).to_owned(),
                    message: e.to_string(),
                })?;
            if spec.name != *file {
                return Err(RegistryError::BadSchema {
                    file: (*file).to_owned(),
                    message: format!("`name` is `{}`, expected `{file}`", spec.name),
                });
            }
            check_schema(&spec).map_err(|message| RegistryError::BadSchema {
                file: (*file).to_owned(),
                message,
            })?;
            if specs.insert(spec.name.clone(), spec).is_some() {
                return Err(RegistryError::Duplicate((*file).to_owned()));
            }
        }
        let mut order = Vec::new();
        let mut tools = HashMap::new();
        for tool in implementations {
            let name = tool.tool_name().to_owned();
            let spec = specs
                .remove(&name)
                .ok_or_else(|| match tools.contains_key(&name) {
                    true => RegistryError::Duplicate(name.clone()),
                    false => RegistryError::NoSchema(name.clone()),
                })?;
            order.push(name.clone());
            tools.insert(name, RegisteredTool { spec, tool });
        }
        if let Some(orphan) = specs.into_keys().next() {
            return Err(RegistryError::NoImplementation(orphan));
        }
        let schemas = order.iter().map(|n| tools[n].spec.schema()).collect();
        Ok(Self {
            order,
            tools,
            schemas,
        })
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    /// Every tool in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.order.iter().map(|n| &self.tools[n])
    }

    /// TOOLS: every schema, as sent to the model.
    pub fn tools(&self) -> &[ToolSchema] {
        &self.schemas
    }

    /// AGENT_TOOLS: schemas of tools with `agent: true` (plan sub-agents).
    pub fn agent_tools(&self) -> Vec<ToolSchema> {
        self.filtered(|s| s.agent)
    }

    /// TASK_AGENT_TOOLS: schemas of tools with `task_agent: true` (task sub-agents).
    pub fn task_agent_tools(&self) -> Vec<ToolSchema> {
        self.filtered(|s| s.task_agent)
    }

    /// AGENT_AUTO_TOOLS: names of tools with `auto_approve: true`.
    pub fn agent_auto_tools(&self) -> BTreeSet<String> {
        self.names(|s| s.auto_approve)
    }

    /// TASK_AUTO_TOOLS: the same filter as [`Self::agent_auto_tools`].
    pub fn task_auto_tools(&self) -> BTreeSet<String> {
        self.names(|s| s.auto_approve)
    }

    /// BUILTIN_TOOL_NAMES: every built-in name (tool search keeps these always visible).
    pub fn builtin_tool_names(&self) -> BTreeSet<String> {
        self.names(|_| true)
    }

    /// PRIMARY_KEY_MAP: tool name → the parameter a bare string maps to.
    pub fn primary_key_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .filter_map(|t| Some((t.spec.name.clone(), t.spec.primary_key.clone()?)))
            .collect()
    }

    fn filtered(&self, keep: impl Fn(&ToolSpec) -> bool) -> Vec<ToolSchema> {
        self.iter()
            .filter(|t| keep(&t.spec))
            .map(|t| t.spec.schema())
            .collect()
    }

    fn names(&self, keep: impl Fn(&ToolSpec) -> bool) -> BTreeSet<String> {
        self.iter()
            .filter(|t| keep(&t.spec))
            .map(|t| t.spec.name.clone())
            .collect()
    }
}

fn check_schema(spec: &ToolSpec) -> Result<(), String> {
    let params = spec
        .parameters
        .as_object()
        .ok_or("`parameters` is not an object")?;
    if params.get("type").and_then(Value::as_str) != Some("object") {
        return Err("`parameters.type` must be \"object\"".into());
    }
    let props = params
        .get("properties")
        .and_then(Value::as_object)
        .ok_or("`parameters.properties` is missing")?;
    for req in params
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = req.as_str().ok_or("`required` holds a non-string")?;
        if !props.contains_key(name) {
            return Err(format!(
                "required parameter `{name}` is not in `properties`"
            ));
        }
    }
    if let Some(pk) = &spec.primary_key
        && !props.contains_key(pk)
    {
        return Err(format!("primary_key `{pk}` is not in `properties`"));
    }
    if spec.description.trim().is_empty() {
        return Err("`description` is empty".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn json_files_and_implementations_are_the_same_set() {
        let files: BTreeSet<String> = embedded::TOOL_SCHEMAS
            .iter()
            .map(|(f, _)| (*f).to_owned())
            .collect();
        let implemented: BTreeSet<String> = default_tools()
            .iter()
            .map(|t| t.tool_name().to_owned())
            .collect();
        assert_eq!(files, implemented);
        ToolRegistry::builtin().expect("the built-in registry must build");
    }

    #[test]
    fn an_orphan_schema_is_an_error() {
        let json = r#"{"name":"ghost","description":"d","parameters":{"type":"object","properties":{}},"agent":false,"task_agent":false,"auto_approve":false,"primary_key":null}"#;
        let err = ToolRegistry::new(vec![], &[("ghost", json)]).unwrap_err();
        assert!(matches!(err, RegistryError::NoImplementation(n) if n == "ghost"));
    }

    #[test]
    fn an_implementation_without_schema_is_an_error() {
        let err = ToolRegistry::new(default_tools(), &[]).unwrap_err();
        assert!(matches!(err, RegistryError::NoSchema(_)));
    }

    #[test]
    fn derived_sets_follow_the_reference() {
        let r = ToolRegistry::builtin().unwrap();
        let names = |v: Vec<ToolSchema>| v.into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(
            names(r.tools().to_vec()),
            [
                "bash",
                "read_file",
                "write_file",
                "edit_file",
                "search",
                "math",
                "man",
                "web_fetch",
                "web_search",
                "task",
                "plan",
                "memory",
                "recall",
                "notify",
                "read_resource",
                "use_prompt",
                "watch"
            ]
        );
        assert_eq!(
            names(r.agent_tools()),
            [
                "read_file",
                "search",
                "math",
                "man",
                "web_fetch",
                "web_search",
                "notify",
                "read_resource",
                "use_prompt"
            ]
        );
        assert_eq!(
            names(r.task_agent_tools()),
            [
                "bash",
                "read_file",
                "write_file",
                "edit_file",
                "search",
                "math",
                "man",
                "web_fetch",
                "web_search",
                "notify",
                "read_resource",
                "use_prompt"
            ]
        );
        let auto: Vec<_> = r.agent_auto_tools().into_iter().collect();
        assert_eq!(
            auto,
            [
                "man",
                "memory",
                "notify",
                "read_file",
                "recall",
                "search",
                "watch"
            ]
        );
        assert_eq!(r.task_auto_tools(), r.agent_auto_tools());
        assert_eq!(r.builtin_tool_names().len(), 17);
        let pk = r.primary_key_map();
        let expected: BTreeMap<String, String> = [
            ("bash", "command"),
            ("edit_file", "old_string"),
            ("man", "page"),
            ("math", "code"),
            ("memory", "name"),
            ("notify", "message"),
            ("plan", "prompt"),
            ("recall", "query"),
            ("read_file", "path"),
            ("read_resource", "uri"),
            ("search", "query"),
            ("task", "prompt"),
            ("use_prompt", "name"),
            ("watch", "name"),
            ("web_fetch", "url"),
            ("web_search", "query"),
            ("write_file", "content"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
        assert_eq!(pk, expected);
    }

    #[test]
    fn schemas_sent_to_the_model_have_no_metadata_keys() {
        let r = ToolRegistry::builtin().unwrap();
        for s in r.tools() {
            let v = serde_json::to_value(s).unwrap();
            for key in ["agent", "task_agent", "auto_approve", "primary_key"] {
                assert!(v.get(key).is_none(), "{} leaks {key}", s.name);
            }
        }
    }
}

#[cfg(test)]
mod schema_args;
