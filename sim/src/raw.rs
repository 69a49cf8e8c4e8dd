//! A buffered, self-describing value, used where a table must be looked at before it is
//! deserialized (a straggler entry without `kind` is a fixed slowdown).

use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// Any value of a self-describing format (TOML, JSON), kept in memory.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Raw {
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<Raw>),
    Map(Vec<(String, Raw)>),
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Raw;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
                Ok(Raw::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
                Ok(Raw::I64(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
                Ok(Raw::U64(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
                Ok(Raw::F64(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
                Ok(Raw::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Raw, E> {
                Ok(Raw::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(Raw::Seq(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Raw>()? {
                    out.push((k, v));
                }
                Ok(Raw::Map(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserializer<'de> for Raw {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Raw::Bool(v) => visitor.visit_bool(v),
            Raw::I64(v) => visitor.visit_i64(v),
            Raw::U64(v) => visitor.visit_u64(v),
            Raw::F64(v) => visitor.visit_f64(v),
            Raw::Str(v) => visitor.visit_string(v),
            Raw::Seq(v) => visitor.visit_seq(SeqDeserializer::new(v.into_iter())),
            Raw::Map(v) => visitor.visit_map(MapDeserializer::new(v.into_iter())),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Raw::Str(s) => visitor.visit_enum(s.into_deserializer()),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

impl IntoDeserializer<'_, Error> for Raw {
    type Deserializer = Raw;
    fn into_deserializer(self) -> Raw {
        self
    }
}

/// Converts an error of the buffered value into the outer deserializer's.
/// `skip_serializing_if` for flags that default to off.
pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

pub(crate) fn lift<E: de::Error>(e: Error) -> E {
    E::custom(e)
}

/// A `&'static str` field read back through [`static_str`]. (Serde's derive sees a `&str`
/// field by its spelling and would borrow it from the input; behind this alias it does not.)
pub(crate) type StaticStr = &'static str;

/// Serde for `&'static str` fields (a schedule's name, an algorithm's kind): written as a
/// string, read back as one of the names the engine uses, leaked only when it is none of them
/// (a few bytes, once per resume).
pub(crate) mod static_str {
    use serde::{Deserialize, Deserializer, Serializer};

    const KNOWN: &[&str] = &[
        "sgp",
        "overlap-sgp",
        "static",
        "one-peer-exponential",
        "two-peer-exponential",
        "bidirectional-exponential",
    ];

    pub(crate) fn serialize<S: Serializer>(s: &&'static str, out: S) -> Result<S::Ok, S::Error> {
        out.serialize_str(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<&'static str, D::Error> {
        let s = String::deserialize(d)?;
        Ok(KNOWN
            .iter()
            .copied()
            .find(|k| *k == s)
            .unwrap_or_else(|| Box::leak(s.into_boxed_str())))
    }
}
