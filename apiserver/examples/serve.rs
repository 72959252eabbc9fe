//! Runs the embedded API server until Ctrl-C:
//! `cargo run -p wasmctrl-apiserver --example serve -- KUBECONFIG_PATH [DATA_DIR]`.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let kubeconfig = args.next().unwrap_or_else(|| "kubeconfig".into());
    let config = wasmctrl_apiserver::Config {
        data_dir: args.next().map(Into::into),
        ..Default::default()
    };
    let server = wasmctrl_apiserver::ApiServer::start(config).await?;
    server.write_kubeconfig(std::path::Path::new(&kubeconfig))?;
    println!("{} (kubeconfig {kubeconfig})", server.url());
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
