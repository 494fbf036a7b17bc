//! An Events API envelope read for what classification needs and nothing more: the fields of an
//! object are picked by name as raw JSON text borrowed from the body (everything else is
//! skipped, never built), and a field is taken only when it has the type wanted — any other
//! value reads as absent, as it did when the whole body was a `serde_json::Value`, so an unknown
//! shape is forwarded, never refused. Where a key repeats, the last one counts, as there.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The raw values of the fields named `keys` of the JSON object `json`, in the order of `keys`;
/// `None` when `json` is not an object.
pub fn pick<'a, const N: usize>(json: &'a str, keys: &[&str; N]) -> Option<[Option<&'a RawValue>; N]> {
    if json.trim_start().as_bytes().first() != Some(&b'{') {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(json);
    Pick(keys).deserialize(&mut de).ok()
}

/// [`pick`] for the body itself (bytes): an error when it is not valid JSON.
pub fn pick_body<'a, const N: usize>(
    body: &'a [u8],
    keys: &[&str; N],
) -> Result<[Option<&'a RawValue>; N], serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let fields = Pick(keys).deserialize(&mut de)?;
    de.end()?;
    Ok(fields)
}

/// A string value (borrowed unless it has escapes); `None` for any other value.
pub fn string(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    let text = raw?.get();
    if !text.starts_with('"') {
        return None;
    }
    match serde_json::from_str::<&str>(text) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// A string value, owned.
pub fn owned(raw: Option<&RawValue>) -> Option<String> {
    string(raw).map(Cow::into_owned)
}

pub fn boolean(raw: Option<&RawValue>) -> Option<bool> {
    serde_json::from_str(raw?.get()).ok()
}

pub fn unsigned(raw: Option<&RawValue>) -> Option<u64> {
    serde_json::from_str(raw?.get()).ok()
}

/// The elements of an array value; none for any other value.
pub fn elements(raw: Option<&RawValue>) -> Vec<&RawValue> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_default()
}

struct Pick<'k, const N: usize>(&'k [&'k str; N]);

impl<'de, const N: usize> DeserializeSeed<'de> for Pick<'_, N> {
    type Value = [Option<&'de RawValue>; N];

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for Pick<'_, N> {
    type Value = [Option<&'de RawValue>; N];

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = [None; N];
        while let Some(Key(key)) = map.next_key()? {
            match self.0.iter().position(|k| *k == key) {
                Some(i) => out[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

/// An object's key, borrowed unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_picked_by_name_and_typed_leniently() {
        let json = r#"{"a":"x","b":{"c":1},"skip":[1,{"a":2}],"n":7,"t":true,"e":"q\"uote","a":"last"}"#;
        let [a, b, n, t, e, missing] = pick(json, &["a", "b", "n", "t", "e", "missing"]).unwrap();
        assert_eq!(string(a).as_deref(), Some("last"), "the last of a repeated key");
        assert_eq!(string(b), None, "an object is not a string");
        assert_eq!((unsigned(n), boolean(t)), (Some(7), Some(true)));
        assert_eq!((unsigned(a), boolean(n)), (None, None));
        assert_eq!(string(e).as_deref(), Some("q\"uote"));
        assert!(missing.is_none());
        let [c] = pick(b.unwrap().get(), &["c"]).unwrap();
        assert_eq!(unsigned(c), Some(1));
        assert!(pick("[1]", &["a"]).is_none() && pick("\"s\"", &["a"]).is_none());
    }

    #[test]
    fn escaped_keys_are_keys_too() {
        let [a] = pick(r#"{"\u0061":"x"}"#, &["a"]).unwrap();
        assert_eq!(string(a).as_deref(), Some("x"));
    }

    #[test]
    fn a_body_that_is_not_json_is_an_error() {
        assert!(pick_body(b"{\"a\":1", &["a"]).is_err());
        assert!(pick_body(b"{\"a\":1} x", &["a"]).is_err());
        assert!(pick_body(b"{\"a\":1}  ", &["a"]).is_ok());
    }
}
