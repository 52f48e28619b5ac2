//! The JSON Schema of each job's arguments, derived by `#[job]`, and the document of every
//! linked job ([`schema`]) that producers in other languages check their payloads against
//! (`sk schema`, the clients in `clients/`, docs/clients.md).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::registry::Registration;

/// The document's format: a reader refuses one it does not know.
pub const SCHEMA_FORMAT: &str = "sk-schema/1";

/// The JSON Schema dialect of each job's `args`.
const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The schemas of every `#[job]` linked into this binary, as one JSON document sorted by
/// task type: per job its queue, priority, attempt limit, backoff, timeout, whether its
/// arguments are sealed, its schedule, the argument that names its tenant, and `args`, the JSON Schema (draft 2020-12) of its
/// arguments. `sk schema` prints it; a worker writes each job's entry to the database at
/// start (`WorkerBuilder::publish_schemas`).
///
/// ```
/// let document = sk_runtime::schema().unwrap();
/// assert_eq!(document["format"], "sk-schema/1");
/// ```
///
/// # Errors
/// [`Error::DuplicateTaskType`] when two linked jobs share a task type.
pub fn schema() -> Result<Value> {
    let mut jobs: BTreeMap<&'static str, &'static Registration> = BTreeMap::new();
    for reg in inventory::iter::<Registration> {
        if let Some(first) = jobs.insert(reg.task_type, reg) {
            let (a, b) = crate::registry::order(first, reg);
            return Err(Error::DuplicateTaskType {
                task_type: reg.task_type.to_owned(),
                first: format!("{}:{}", a.file, a.line),
                second: format!("{}:{}", b.file, b.line),
            });
        }
    }
    let jobs: Map<String, Value> = jobs
        .into_iter()
        .map(|(name, reg)| (name.to_owned(), describe(reg)))
        .collect();
    Ok(json!({ "format": SCHEMA_FORMAT, "jobs": jobs }))
}

/// One job's entry in the document.
pub(crate) fn describe(reg: &Registration) -> Value {
    let options = &reg.options;
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let backoff = match options.backoff {
        crate::Backoff::Exponential { base, max } => {
            json!({ "kind": "exponential", "base_ms": millis(base), "max_ms": millis(max) })
        }
        crate::Backoff::Linear { base, max } => {
            json!({ "kind": "linear", "base_ms": millis(base), "max_ms": millis(max) })
        }
        crate::Backoff::Constant(delay) => json!({ "kind": "constant", "base_ms": millis(delay) }),
        crate::Backoff::Custom(_) => json!({ "kind": "custom" }),
    };
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let args = (reg.args_schema)(&mut generator);
    json!({
        "queue": options.queue,
        "priority": options.priority,
        "max_attempts": options.max_attempts,
        "backoff": backoff,
        "timeout_ms": options.timeout.map(millis),
        "encrypted": options.encrypted,
        "schedule": reg.schedule,
        "every_ms": reg.every.map(millis),
        "tenant_from": reg.tenant_from,
        "args": args,
    })
}

/// The object schema of a job's arguments, one field at a time (the code `#[job]`
/// generates builds it).
#[derive(Default)]
pub struct ArgsSchema {
    properties: Map<String, Value>,
    required: Vec<Value>,
    /// Required fields with aliases: one of the names must be there.
    either: Vec<Value>,
    /// `#[serde(flatten)]` fields' own object schemas.
    flattened: Vec<Value>,
}

impl ArgsSchema {
    /// No fields yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds argument `name` (as serde reads it: after `rename`), also accepted as each
    /// of `aliases`, with the schema of its value.
    #[must_use]
    pub fn field(mut self, name: &str, aliases: &[&str], required: bool, schema: Value) -> Self {
        for alias in aliases {
            self.properties.insert((*alias).to_owned(), schema.clone());
        }
        self.properties.insert(name.to_owned(), schema);
        if required {
            if aliases.is_empty() {
                self.required.push(json!(name));
            } else {
                let names = std::iter::once(name).chain(aliases.iter().copied());
                let any: Vec<Value> = names.map(|n| json!({ "required": [n] })).collect();
                self.either.push(json!({ "anyOf": any }));
            }
        }
        self
    }

    /// Adds a `#[serde(flatten)]` argument: its fields are the payload's own.
    #[must_use]
    pub fn flatten(mut self, schema: Value) -> Self {
        self.flattened.push(schema);
        self
    }

    /// The schema of a value sk cannot describe, as `what` says (an argument read
    /// `with` a function of its own): any JSON passes.
    #[must_use]
    pub fn unchecked(what: &str) -> Value {
        json!({ "description": what })
    }

    /// The object schema, with the definitions its fields refer to.
    pub fn finish(self, generator: &mut SchemaGenerator) -> Value {
        let mut schema = Map::new();
        schema.insert("$schema".into(), json!(DIALECT));
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(self.properties));
        if !self.required.is_empty() {
            schema.insert("required".into(), Value::Array(self.required));
        }
        let all: Vec<Value> = self.either.into_iter().chain(self.flattened).collect();
        if !all.is_empty() {
            schema.insert("allOf".into(), Value::Array(all));
        }
        let definitions = generator.take_definitions(true);
        if !definitions.is_empty() {
            schema.insert("$defs".into(), Value::Object(definitions));
        }
        Value::Object(schema)
    }
}

/// Picks the schema of an argument's type by autoref: its [`JsonSchema`] where it has
/// one ([`ViaJsonSchema`]), else a schema that lets any JSON through and names the type
/// ([`ViaNoSchema`]), so an application's own argument types need no derive of it.
pub struct SchemaTag<T>(PhantomData<fn() -> T>);

impl<T> SchemaTag<T> {
    /// The tag of type `T`.
    #[must_use]
    pub fn new() -> Self {
        SchemaTag(PhantomData)
    }
}

impl<T> Default for SchemaTag<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The first choice of [`SchemaTag`]: the type's own schema.
pub trait ViaJsonSchema {
    /// The schema of the argument's value.
    fn field_schema(self, generator: &mut SchemaGenerator) -> Value;
}

// By value on `&&SchemaTag`: method lookup tries it before `&SchemaTag` (as `ResultTag`).
impl<T: JsonSchema> ViaJsonSchema for &&SchemaTag<T> {
    fn field_schema(self, generator: &mut SchemaGenerator) -> Value {
        generator.subschema_for::<T>().to_value()
    }
}

/// The second choice of [`SchemaTag`]: any JSON, with the type's name.
pub trait ViaNoSchema {
    /// The schema of the argument's value.
    fn field_schema(self, generator: &mut SchemaGenerator) -> Value;
}

impl<T> ViaNoSchema for &SchemaTag<T> {
    fn field_schema(self, _: &mut SchemaGenerator) -> Value {
        ArgsSchema::unchecked(&format!(
            "{}: any JSON (the type has no schemars::JsonSchema; the worker checks it)",
            std::any::type_name::<T>()
        ))
    }
}
