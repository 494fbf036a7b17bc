use super::*;

#[test]
fn telemetry_is_off_by_default_and_validated_when_on() {
    let base = app("bot", "SG_TEL_SECRET", "");
    let off = load(&base).unwrap();
    assert!(!off.telemetry.is_on());
    assert_eq!(off.telemetry, TelemetryConfig::default());
    let on = load(&format!(
        "[telemetry]\notlp_endpoint = \"http://collector:4318/\"\nservice_name = \"gw\"\nsample_ratio = 0.25\n\
         trace_url = \"https://tempo.example/trace/{{trace_id}}\"\n{base}"
    ))
    .unwrap();
    let t = &on.telemetry;
    assert_eq!(t.traces_url().as_deref(), Some("http://collector:4318/v1/traces"), "the base URL, its path added");
    assert_eq!((t.service_name.as_str(), t.sample_ratio), ("gw", 0.25));
    assert_eq!(t.link("abc").as_deref(), Some("https://tempo.example/trace/abc"));
    for (line, key) in [
        ("otlp_endpoint = \"grpc://collector:4317\"", "telemetry.otlp_endpoint"),
        ("otlp_endpoint = \"http://collector:4318/v1/traces\"", "telemetry.otlp_endpoint"),
        ("otlp_endpoint = \"http://collector:4318/?k=v\"", "telemetry.otlp_endpoint"),
        ("sample_ratio = 1.5", "telemetry.sample_ratio"),
        ("service_name = \" \"", "telemetry.service_name"),
        ("trace_url = \"https://tempo.example/trace/\"", "telemetry.trace_url"),
        ("max_queue = 1", "telemetry.max_queue"),
        ("export_timeout = \"2m\"", "telemetry.export_timeout"),
    ] {
        assert_err(&load_err(&format!("[telemetry]\n{line}\n{base}")), key);
    }
    assert!(load(&format!("[telemetry]\notlp_endpoint = \"off\"\n{base}")).unwrap().telemetry.otlp_endpoint.is_none());
}
