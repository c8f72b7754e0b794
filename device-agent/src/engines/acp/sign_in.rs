//! Signing the agent in before its session (`authenticate`), and what to tell the owner when
//! it cannot be done from here.
//!
//! Only an `env_var` method is ever used, and only when every variable it needs is in the
//! environment the engine was started with: the key is already the agent's, so saying which
//! method to use gives it nothing new. Every other method needs the owner at this computer.

use agent_client_protocol::v1::schema::AuthenticateRequest;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::Agent;
use serde::Deserialize;
use serde_json::Value;

use super::handshake::describe;
use super::updates::cut_chars;

/// Most methods a summary names (an agent's list is its own, and may be long).
const NAMED_METHODS: usize = 10;
/// Longest name or description a summary quotes, in characters.
const QUOTED_CHARS: usize = 200;

/// A sign-in method as the agent lists it, read from the raw answer: the typed schema has no
/// `env_var` and loses its variables.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Method {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// `env_var`, `terminal`, …; none for a sign-in the agent handles itself.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub vars: Vec<Variable>,
}

/// A variable an `env_var` method reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Variable {
    pub name: String,
    #[serde(default)]
    pub optional: bool,
}

impl Method {
    /// `env_var`, `agent` (the agent signs in itself), or the type the agent named.
    pub fn kind_name(&self) -> &str {
        self.kind.as_deref().unwrap_or("agent")
    }

    /// The variables it needs that `env` lacks.
    fn missing<'a>(&'a self, env: &[String]) -> Vec<&'a str> {
        self.vars
            .iter()
            .filter(|var| !var.optional && !env.contains(&var.name))
            .map(|var| var.name.as_str())
            .collect()
    }
}

/// The methods of an `initialize` answer, in the agent's order; a malformed one is skipped.
pub fn methods(initialize: &Value) -> Vec<Method> {
    initialize
        .get("authMethods")
        .and_then(Value::as_array)
        .map(|listed| {
            listed
                .iter()
                .filter_map(|method| serde_json::from_value(method.clone()).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The names of the variables the engine's process is started with: where an `env_var`
/// method's key would be.
pub fn engine_variables(env: &[(String, String)]) -> Vec<String> {
    env.iter().map(|(name, _)| name.clone()).collect()
}

/// The first `env_var` method all of whose variables are in `env`.
pub fn env_method<'a>(methods: &'a [Method], env: &[String]) -> Option<&'a Method> {
    methods.iter().find(|method| {
        method.kind.as_deref() == Some("env_var")
            && !method.vars.is_empty()
            && method.missing(env).is_empty()
    })
}

/// `authenticate` with `method`.
///
/// # Errors
/// The agent's refusal, naming the method.
pub async fn authenticate(cx: &ConnectionTo<Agent>, method: &Method) -> Result<(), String> {
    cx.send_request(AuthenticateRequest::new(method.id.clone()))
        .block_task()
        .await
        .map(|_| ())
        .map_err(|err| {
            format!(
                "the agent refused to sign in with {} ({}): {}",
                quoted(&method.name),
                quoted(&method.id),
                describe(&err)
            )
        })
}

/// Why a session could not start for want of a sign-in, and what to run on this computer:
/// `hint` is the engine's own sign-in command when it is known.
pub fn needed(engine: &str, methods: &[Method], env: &[String], hint: Option<&str>) -> String {
    let offered = if methods.is_empty() {
        "no sign-in method".to_owned()
    } else {
        methods
            .iter()
            .take(NAMED_METHODS)
            .map(|method| described(method, env))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let how = match hint {
        Some(command) => format!("run `{command}` on this computer"),
        None => "sign the agent in on this computer as its documentation says".to_owned(),
    };
    format!(
        "the agent needs a sign-in first; it offers: {offered}. To sign it in, {how}, then run \
         `tether-agent engine check {engine}` and run the job again"
    )
}

/// A method as the owner reads it: its name, its description, what it lacks.
fn described(method: &Method, env: &[String]) -> String {
    let mut text = quoted(&method.name);
    if let Some(description) = method.description.as_deref().filter(|d| !d.is_empty()) {
        text.push_str(&format!(" ({})", quoted(description)));
    }
    let missing = method.missing(env);
    if method.kind.as_deref() == Some("env_var") && !missing.is_empty() {
        text.push_str(&format!(
            ", which needs {} in the engine's environment",
            missing.join(", ")
        ));
    }
    text
}

fn quoted(text: &str) -> String {
    cut_chars(text.trim(), QUOTED_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed() -> Vec<Method> {
        methods(&json!({"protocolVersion": 1, "authMethods": [
            {"id": "chatgpt", "name": "Login with ChatGPT", "description": "Use your ChatGPT account"},
            {"type": "env_var", "id": "openai-api-key", "name": "Use OPENAI_API_KEY",
             "description": "Requires OPENAI_API_KEY", "vars": [{"name": "OPENAI_API_KEY"}]},
            {"type": "env_var", "id": "other-key", "name": "Use OTHER_KEY",
             "vars": [{"name": "OTHER_KEY"}]},
            {"name": "no id"}
        ]}))
    }

    #[test]
    fn the_raw_list_keeps_types_and_variables() {
        let methods = listed();
        assert_eq!(methods.len(), 3, "a malformed method is skipped");
        assert_eq!(methods[0].kind_name(), "agent");
        assert_eq!(methods[1].kind_name(), "env_var");
        assert_eq!(methods[1].vars[0].name, "OPENAI_API_KEY");
    }

    #[test]
    fn an_env_var_method_is_used_only_when_every_variable_is_there() {
        let methods = listed();
        assert_eq!(env_method(&methods, &["PATH".to_owned()]), None);
        let both = ["OTHER_KEY".to_owned(), "OPENAI_API_KEY".to_owned()];
        assert_eq!(
            env_method(&methods, &both).map(|m| m.id.as_str()),
            Some("openai-api-key"),
            "the first in the agent's order"
        );
        let env = engine_variables(&[("OTHER_KEY".to_owned(), "v".to_owned())]);
        assert_eq!(
            env_method(&methods, &env).map(|m| m.id.as_str()),
            Some("other-key")
        );
    }

    #[test]
    fn the_owner_is_told_the_methods_and_the_command() {
        let methods = listed();
        let with_hint = needed("codex", &methods, &[], Some("codex login"));
        assert!(
            with_hint.starts_with(
                "the agent needs a sign-in first; it offers: Login with ChatGPT (Use your \
                 ChatGPT account); Use OPENAI_API_KEY (Requires OPENAI_API_KEY), which needs \
                 OPENAI_API_KEY in the engine's environment;"
            ),
            "{with_hint}"
        );
        assert!(
            with_hint.ends_with(
                "To sign it in, run `codex login` on this computer, then run `tether-agent \
                 engine check codex` and run the job again"
            ),
            "{with_hint}"
        );
        let without = needed("claude", &[], &[], None);
        assert!(
            without.contains("no sign-in method")
                && without.contains(
                    "sign the agent in on this computer as its documentation says, then run \
                     `tether-agent engine check claude`"
                ),
            "{without}"
        );
    }
}
