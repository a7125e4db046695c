//! The Helm chart (`deploy/helm/converge`), rendered by a real `helm` and
//! read back: `helm lint` passes for every example values file, and the
//! rendered manifests of each agree with converge itself. Every variable a
//! container gets is one converge reads (the flags' variables, from the
//! command line's definition, and the OpenTelemetry ones it honours); every
//! probe and Service port names a container port; the split topology yields
//! a control and a broker Deployment, `all` one; the grace period covers
//! the preStop sleep, the shutdown timeout and the drain's cleanup bound;
//! and the values schema refuses a wrong type.
//!
//! `helm` is found as `$HELM`, on `PATH`, or where `deploy/helm/install-helm`
//! puts it (scripts/test runs that first).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use clap::CommandFactory as _;
use converge_integration::processes::repository_root;
use serde_json::Value;

/// Where `deploy/helm/install-helm` installs helm.
const CACHED_HELM: &str = "/var/tmp/converge-tools/bin/helm";

/// The Kubernetes version templates are rendered for (the chart needs 1.30+).
const KUBE_VERSION: &str = "1.31.0";

fn helm() -> anyhow::Result<PathBuf> {
    if let Some(helm) = std::env::var_os("HELM") {
        return Ok(PathBuf::from(helm));
    }
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("helm"))
        .find(|path| path.is_file());
    on_path
        .or_else(|| Some(PathBuf::from(CACHED_HELM)).filter(|path| path.is_file()))
        .ok_or_else(|| anyhow::anyhow!("helm is not installed: run deploy/helm/install-helm (scripts/test does)"))
}

fn chart() -> PathBuf {
    repository_root().join("deploy/helm/converge")
}

/// Runs helm; its stdout, or an error with its stderr.
fn run_helm(args: &[&str]) -> anyhow::Result<Result<String, String>> {
    let out = Command::new(helm()?).args(args).output()?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(stderr)
    })
}

/// The manifests `helm template` renders for the example values file `name`
/// plus `sets`, as JSON values.
fn render(name: &str, sets: &[&str]) -> anyhow::Result<Vec<Value>> {
    let chart = chart();
    let values = chart.join("examples").join(name);
    let mut args = vec![
        "template",
        "t",
        chart.to_str().unwrap_or_default(),
        "--kube-version",
        KUBE_VERSION,
        "-f",
        values.to_str().unwrap_or_default(),
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let text = run_helm(&args)?.map_err(|stderr| anyhow::anyhow!("helm template {name}: {stderr}"))?;
    let mut documents = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(document)?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// Every environment variable converge reads as a setting: its flags'
/// variables (from the command line's definition) and the OpenTelemetry
/// and AWS variables it honours.
fn converge_settings() -> BTreeSet<String> {
    fn walk(command: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in command.get_arguments() {
            if let Some(env) = arg.get_env() {
                out.insert(env.to_string_lossy().into_owned());
            }
        }
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut settings = BTreeSet::new();
    walk(&converge_service::config::Cli::command(), &mut settings);
    settings.extend(converge_service::config::OTEL_VARIABLES.iter().map(|v| (*v).to_owned()));
    settings.extend(converge_service::config::AWS_VARIABLES.iter().map(|v| (*v).to_owned()));
    settings
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// A container's environment as (name, literal value if any).
fn env_of(container: &Value) -> Vec<(String, Option<String>)> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (str_of(&e["name"]).to_owned(), e["value"].as_str().map(str::to_owned)))
        .collect()
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    env_of(container)
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v)
}

fn port_of_addr(addr: &str) -> Option<u64> {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
}

/// The checks every rendered values set must pass; returns the Deployments'
/// roles.
fn check_manifests(name: &str, documents: &[Value]) -> anyhow::Result<Vec<String>> {
    let settings = converge_settings();
    let mut wrong = Vec::new();
    let mut roles = Vec::new();
    let deployments = of_kind(documents, "Deployment");
    for deployment in &deployments {
        let pod = &deployment["spec"]["template"]["spec"];
        let containers = pod["containers"].as_array().cloned().unwrap_or_default();
        anyhow::ensure!(containers.len() == 1, "{name}: one container per pod");
        let container = &containers[0];
        let ports: Vec<(String, u64)> = container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (str_of(&p["name"]).to_owned(), p["containerPort"].as_u64().unwrap_or(0)))
            .collect();
        let port_named = |n: &str| ports.iter().find(|(p, _)| p == n).map(|(_, number)| *number);

        // Only converge's own settings.
        for (var, _) in env_of(container) {
            if !settings.contains(&var) {
                wrong.push(format!("{name}: {var} is no converge setting"));
            }
        }
        let role = env_value(container, "ROLE").unwrap_or_default();
        roles.push(role.clone());
        if deployment["metadata"]["labels"]["app.kubernetes.io/component"] != role.as_str() {
            wrong.push(format!("{name}: the {role} Deployment is labelled otherwise"));
        }

        // The listeners' ports are the container's ports.
        for (var, port) in [
            ("LISTEN_ADDR", "grpc"),
            ("HEALTH_ADDR", "health"),
            ("METRICS_ADDR", "metrics"),
        ] {
            let set = env_value(container, var).and_then(|a| port_of_addr(&a));
            if set != port_named(port) {
                wrong.push(format!(
                    "{name}: {var} port {set:?}, container port {port} {:?}",
                    port_named(port)
                ));
            }
        }
        // Probes: liveness on /livez, readiness on /readyz, on the health port.
        for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
            let get = &container[probe]["httpGet"];
            if get["path"] != path || port_named(str_of(&get["port"])).is_none() || get["port"] != "health" {
                wrong.push(format!("{name}: {probe} is {get}"));
            }
        }

        // Graceful shutdown: the pod's grace period covers the preStop sleep,
        // then SIGTERM's drain bound (SHUTDOWN_TIMEOUT_SECS + SHUTDOWN_CLEANUP).
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(0);
        let pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap_or(0);
        let timeout: u64 = env_value(container, "SHUTDOWN_TIMEOUT_SECS")
            .and_then(|t| t.parse().ok())
            .unwrap_or(10);
        let cleanup = converge_service::server::SHUTDOWN_CLEANUP.as_secs();
        if pre_stop == 0 || grace < pre_stop + timeout + cleanup {
            wrong.push(format!(
                "{name}: grace {grace} s < preStop {pre_stop} + shutdown {timeout} + cleanup {cleanup}"
            ));
        }

        // Non-root, no escalation, read-only root filesystem; /tmp writable.
        let security = &container["securityContext"];
        if pod["securityContext"]["runAsNonRoot"] != true
            || security["allowPrivilegeEscalation"] != false
            || security["readOnlyRootFilesystem"] != true
        {
            wrong.push(format!(
                "{name}: security context {security} / {}",
                pod["securityContext"]
            ));
        }

        // TLS and password files are where the Secret volumes are mounted.
        for var in [
            "TLS_CERT_FILE",
            "TLS_KEY_FILE",
            "TLS_CLIENT_CA_FILE",
            "DATABASE_PASSWORD_FILE",
        ] {
            if let Some(file) = env_value(container, var) {
                let mounted = container["volumeMounts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|m| file.starts_with(&format!("{}/", str_of(&m["mountPath"]))));
                if !mounted {
                    wrong.push(format!("{name}: {var}={file} is on no mounted volume"));
                }
            }
        }
        if env_value(container, "LISTEN_ADDR").is_some_and(|a| a.starts_with("https://"))
            != env_value(container, "TLS_CERT_FILE").is_some()
        {
            wrong.push(format!("{name}: https:// and the TLS files go together"));
        }

        // One PodDisruptionBudget and spread constraints selecting these pods.
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        let selects = |selector: &Value| {
            selector
                .as_object()
                .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| &labels[k] == v))
        };
        let budgets = of_kind(documents, "PodDisruptionBudget")
            .into_iter()
            .filter(|pdb| selects(&pdb["spec"]["selector"]["matchLabels"]))
            .count();
        if budgets != 1 {
            wrong.push(format!("{name}: {budgets} disruption budgets for the {role} pods"));
        }
        let spread = pod["topologySpreadConstraints"].as_array().cloned().unwrap_or_default();
        if spread.is_empty() || !spread.iter().all(|c| selects(&c["labelSelector"]["matchLabels"])) {
            wrong.push(format!("{name}: topology spread of the {role} pods: {spread:?}"));
        }

        // Every Service that selects these pods targets a port they have.
        for service in of_kind(documents, "Service") {
            if !selects(&service["spec"]["selector"]) {
                continue;
            }
            for port in service["spec"]["ports"].as_array().into_iter().flatten() {
                if port_named(str_of(&port["targetPort"])).is_none() {
                    wrong.push(format!(
                        "{name}: Service {} targets {}",
                        service["metadata"]["name"], port
                    ));
                }
            }
        }
    }
    // Each gRPC Service selects some pod: the API one a control or all pod,
    // the broker one a broker or all pod.
    for service in of_kind(documents, "Service") {
        let selected = deployments.iter().any(|d| {
            let labels = &d["spec"]["template"]["metadata"]["labels"];
            service["spec"]["selector"]
                .as_object()
                .is_some_and(|m| m.iter().all(|(k, v)| &labels[k] == v))
        });
        if !selected {
            wrong.push(format!(
                "{name}: Service {} selects no pod",
                service["metadata"]["name"]
            ));
        }
    }
    anyhow::ensure!(wrong.is_empty(), "{}", wrong.join("\n"));
    roles.sort();
    Ok(roles)
}

#[test]
fn the_chart_lints_and_renders_what_converge_reads() -> anyhow::Result<()> {
    let chart = chart();
    let examples = [
        "minimal.yaml",
        "all-in-one.yaml",
        "ha-tls.yaml",
        "istio.yaml",
        "linkerd.yaml",
    ];
    for name in examples {
        let values = chart.join("examples").join(name);
        run_helm(&[
            "lint",
            "--strict",
            chart.to_str().unwrap_or_default(),
            "-f",
            values.to_str().unwrap_or_default(),
        ])?
        .map_err(|e| anyhow::anyhow!("helm lint {name}: {e}"))?;
    }

    // Minimal: the split topology, a Deployment per role.
    let minimal = render("minimal.yaml", &[])?;
    assert_eq!(check_manifests("minimal", &minimal)?, ["broker", "control"]);
    assert!(of_kind(&minimal, "ServiceMonitor").is_empty());

    // All in one: a single Deployment of ROLE=all behind both gRPC Services,
    // its database URL in a Secret the chart made.
    let all = render("all-in-one.yaml", &[])?;
    assert_eq!(check_manifests("all-in-one", &all)?, ["all"]);
    let secrets = of_kind(&all, "Secret");
    assert_eq!(secrets.len(), 1);
    assert!(secrets[0]["stringData"]["DATABASE_URL"].is_string());

    // HA: TLS and mTLS from Secrets, a replica, metrics with a ServiceMonitor.
    let ha = render("ha-tls.yaml", &[])?;
    assert_eq!(check_manifests("ha-tls", &ha)?, ["broker", "control"]);
    let control = of_kind(&ha, "Deployment")
        .into_iter()
        .find(|d| d["metadata"]["labels"]["app.kubernetes.io/component"] == "control")
        .ok_or_else(|| anyhow::anyhow!("no control Deployment"))?;
    let container = &control["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(control["spec"]["replicas"], 3);
    for var in [
        "TLS_CLIENT_CA_FILE",
        "ALLOWED_API_IDENTITIES",
        "AUTHZ_POLICY_FILE",
        "METRICS_ADDR",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        assert!(env_value(container, var).is_some(), "ha-tls: {var} unset");
    }
    // The authorization policy: a ConfigMap the pods mount, and a policy
    // converge itself accepts.
    let maps = of_kind(&ha, "ConfigMap");
    assert_eq!(maps.len(), 1, "ha-tls: one ConfigMap of the policy");
    let policy = str_of(&maps[0]["data"]["policy.yaml"]);
    converge_service::domain::authz::Policy::parse(policy)
        .map_err(|e| anyhow::anyhow!("ha-tls: the chart's policy does not check: {e:?}"))?;
    let volumes = control["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        volumes
            .iter()
            .any(|v| v["configMap"]["name"] == maps[0]["metadata"]["name"]),
        "ha-tls: the policy ConfigMap is not mounted"
    );
    let read_url = env_of(container).iter().any(|(n, _)| n == "DATABASE_READ_URL");
    assert!(read_url, "ha-tls: DATABASE_READ_URL unset");
    let monitors = of_kind(&ha, "ServiceMonitor");
    assert_eq!(monitors.len(), 1);
    assert_eq!(monitors[0]["spec"]["endpoints"][0]["port"], "metrics");

    // Meshes: plaintext in the pod, the gRPC port named for HTTP/2, the probe
    // port out of the sidecar's way.
    for (name, annotation) in [
        ("istio.yaml", "traffic.sidecar.istio.io/excludeInboundPorts"),
        ("linkerd.yaml", "config.linkerd.io/skip-inbound-ports"),
    ] {
        let documents = render(name, &[])?;
        check_manifests(name, &documents)?;
        for deployment in of_kind(&documents, "Deployment") {
            let template = &deployment["spec"]["template"];
            assert_eq!(template["metadata"]["annotations"][annotation], "8081", "{name}");
            let listen = env_value(&template["spec"]["containers"][0], "LISTEN_ADDR");
            assert_eq!(listen.as_deref(), Some("0.0.0.0:50051"), "{name}");
        }
        for service in of_kind(&documents, "Service")
            .into_iter()
            .filter(|s| s["spec"]["clusterIP"] != "None")
        {
            assert_eq!(service["spec"]["ports"][0]["name"], "grpc", "{name}");
            assert_eq!(service["spec"]["ports"][0]["appProtocol"], "grpc", "{name}");
        }
    }

    // IAM authentication: the flag and the region, pods running as the
    // service account IRSA annotates; or a password file from a Secret.
    let iam = render("aws-iam.yaml", &[])?;
    assert_eq!(check_manifests("aws-iam", &iam)?, ["broker", "control"]);
    let accounts = of_kind(&iam, "ServiceAccount");
    assert_eq!(accounts.len(), 1);
    assert!(accounts[0]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].is_string());
    for deployment in of_kind(&iam, "Deployment") {
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["serviceAccountName"], accounts[0]["metadata"]["name"]);
        assert_eq!(env_value(&pod["containers"][0], "DB_IAM_AUTH").as_deref(), Some("true"));
        assert_eq!(
            env_value(&pod["containers"][0], "AWS_REGION").as_deref(),
            Some("eu-west-1")
        );
    }
    let file = render("minimal.yaml", &["database.passwordSecret.name=converge-db-password"])?;
    check_manifests("password-file", &file)?;
    for deployment in of_kind(&file, "Deployment") {
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert!(env_value(container, "DATABASE_PASSWORD_FILE").is_some());
    }

    // The checks bite: a variable converge does not read, a grace period
    // shorter than the drain.
    let typo = render(
        "minimal.yaml",
        &["extraEnv[0].name=SHUTDOWN_TIMEOUT", "extraEnv[0].value=ten"],
    )?;
    let err = check_manifests("typo", &typo)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("SHUTDOWN_TIMEOUT is no converge setting"), "{err}");
    let mut short = render("minimal.yaml", &["shutdown.shutdownTimeoutSecs=30"])?;
    for document in short.iter_mut().filter(|d| d["kind"] == "Deployment") {
        document["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 39.into();
    }
    let err = check_manifests("short", &short)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("grace 39 s < preStop 5 + shutdown 30 + cleanup 5"),
        "{err}"
    );

    // The schema refuses wrong types; the templates refuse contradictions.
    for (sets, expected) in [
        (&["control.replicas=two"][..], "want integer"),
        (&["topology=mesh"][..], "topology"),
        (&["tls.enabled=yes"][..], "want boolean"),
        (
            &["identities.api[0]=spiffe://td/a"][..],
            "identities need tls.clientCA.enabled",
        ),
        (&["shutdown.terminationGracePeriodSeconds=12"][..], "must be at least"),
        (&["database.iamAuth=true"][..], "needs database.awsRegion"),
        (
            &["authz.policy=roles: []", "authz.existingConfigMap=mine"][..],
            "exclude each other",
        ),
    ] {
        let err = render("minimal.yaml", sets)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(expected), "{sets:?}: {err}");
    }
    Ok(())
}
