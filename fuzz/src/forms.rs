//! Form decoding properties: arbitrary form bytes, and forms built from arbitrary pairs.

use super::*;

// ---------------------------------------------------------------- forms

/// The form fields `classify` reads; the last occurrence of a field wins.
#[derive(Default)]
struct FormModel {
    command: Option<String>,
    channel: Option<String>,
    response_url: Option<String>,
    payload: Option<String>,
    trigger_id: Option<String>,
    ssl_check: bool,
}

impl FormModel {
    fn of<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut m = FormModel::default();
        for (k, v) in pairs {
            let v = v.as_ref().to_string();
            match k.as_ref() {
                "command" => m.command = Some(v),
                "channel_id" => m.channel = Some(v),
                "response_url" => m.response_url = Some(v),
                "payload" => m.payload = Some(v),
                "trigger_id" => m.trigger_id = Some(v),
                "ssl_check" => m.ssl_check = v == "1",
                _ => {}
            }
        }
        m
    }

    /// What a form with these fields is, per `classify`'s contract.
    fn expected(&self, _body: &[u8]) -> Result<Request, ClassifyError> {
        if self.ssl_check {
            return Ok(Request::SslCheck);
        }
        let receipt = |trigger: Option<&str>| trigger.filter(|t| !t.is_empty()).map(|t| id_receipt('t', t));
        if let Some(command) = &self.command {
            return Ok(Request::Delivery(Delivery {
                kind: Kind::Command,
                receipt: receipt(self.trigger_id.as_deref()),
                detail: command.clone(),
                channel: self.channel.clone(),
                response_url: self.response_url.clone(),
                ..Delivery::default()
            }));
        }
        let payload = self.payload.as_ref().ok_or(ClassifyError::UnknownForm)?;
        let Ok(Value::Object(p)) = serde_json::from_str::<Value>(payload) else {
            return Err(ClassifyError::BadPayload);
        };
        let text = |k: &str| p.get(k).and_then(Value::as_str);
        let response_url = text("response_url")
            .or_else(|| p.get("response_urls")?.get(0)?.get("response_url")?.as_str())
            .map(String::from);
        Ok(Request::Delivery(Delivery {
            kind: Kind::Interactivity,
            receipt: receipt(text("trigger_id")),
            detail: text("type").unwrap_or_default().to_string(),
            channel: p.get("channel").and_then(|c| c.get("id")).and_then(Value::as_str).map(String::from),
            response_url,
            ..Delivery::default()
        }))
    }
}

/// Arbitrary bytes as a form: never a panic, never a JSON error, and the model's answer.
pub fn form_bytes(body: &[u8]) {
    let got = classify(FORM, body);
    assert_eq!(got, FormModel::of(form_urlencoded::parse(body)).expected(body), "form {body:?}");
    classify_any(FORM, body);
}

/// An interactivity payload's fields (`None`: left out).
#[derive(Debug, Clone, Default)]
pub struct PayloadFields {
    pub kind: Option<String>,
    pub trigger_id: Option<String>,
    pub response_url: Option<String>,
    pub channel_id: Option<String>,
}

impl PayloadFields {
    pub fn to_json(&self) -> String {
        let mut p = Map::new();
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                p.insert(k.into(), json!(v));
            }
        };
        put("type", &self.kind);
        put("trigger_id", &self.trigger_id);
        put("response_url", &self.response_url);
        if let Some(id) = &self.channel_id {
            p.insert("channel".into(), json!({ "id": id }));
        }
        Value::Object(p).to_string()
    }
}

/// A form built with `form_urlencoded::Serializer` from arbitrary pairs (and optionally a
/// well-formed payload) decodes back to the same pairs, is read as a form whether or not its
/// content type is declared, and classifies to the model's request: `SslCheck` when the last
/// `ssl_check` is `1`, a command when it has `command`, interactivity when it has a payload
/// object, else `UnknownForm`, with every field from the pairs.
pub fn form_pairs(pairs: &[(String, String)], payload: Option<&PayloadFields>) {
    let mut all = pairs.to_vec();
    if let Some(p) = payload {
        all.push(("payload".into(), p.to_json()));
    }
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &all {
        s.append_pair(k, v);
    }
    let body = s.finish().into_bytes();
    let decoded: Vec<(String, String)> =
        form_urlencoded::parse(&body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
    assert_eq!(decoded, all, "form {body:?}");
    let got = classify(FORM, &body);
    let model = FormModel::of(all.iter().map(|(k, v)| (k, v)));
    assert_eq!(got, model.expected(&body));
    assert_eq!(classify(b"", &body), got, "sniffed as a form");
    assert_eq!(classify(b"text/plain", &body), got, "sniffed as a form");
    match &got {
        Ok(Request::SslCheck) => assert!(model.ssl_check),
        Ok(Request::Delivery(d)) if d.kind == Kind::Command => assert!(model.command.is_some()),
        Ok(Request::Delivery(d)) => {
            assert_eq!(d.kind, Kind::Interactivity);
            assert!(model.command.is_none() && model.payload.is_some());
        }
        Err(ClassifyError::UnknownForm) => assert!(model.command.is_none() && model.payload.is_none()),
        Err(ClassifyError::BadPayload) => assert!(model.command.is_none() && model.payload.is_some()),
        other => panic!("{other:?} from a form"),
    }
    // The last pair is the well-formed payload: interactivity unless ssl_check or command.
    if let (Some(p), false, None) = (payload, model.ssl_check, &model.command) {
        let Ok(Request::Delivery(d)) = &got else { panic!("{got:?}") };
        assert_eq!(d.detail, p.kind.clone().unwrap_or_default());
        assert_eq!((&d.channel, &d.response_url), (&p.channel_id, &p.response_url));
    }
    classify_any(FORM, &body);
}
