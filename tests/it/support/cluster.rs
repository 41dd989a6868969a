//! A throwaway PostgreSQL cluster of a test's own (`initdb` and `pg_ctl`
//! from `/usr/lib/postgresql/*/bin`; as the `postgres` user when run as
//! root), for tests that stop the server or change its storage.

use std::path::{Path, PathBuf};

/// The directory holding `initdb` and `pg_ctl`, if a server is installed.
pub fn pg_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A throwaway cluster on loopback; dropped, it is stopped at once.
pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    as_postgres: bool,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn command(&self, program: &Path) -> std::process::Command {
        if self.as_postgres {
            let mut command = std::process::Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            std::process::Command::new(program)
        }
    }

    pub fn create(bin: PathBuf) -> Cluster {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        // `initdb` creates the data directory as the server's user.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let cluster = Cluster {
            data: dir.path().join("data"),
            log: dir.path().join("server.log"),
            port: super::free_port(),
            as_postgres: is_root(),
            bin,
            _dir: dir,
        };
        let out = cluster
            .command(&cluster.bin.join("initdb"))
            .args(["--auth=trust", "--username=postgres", "--no-sync", "-D"])
            .arg(&cluster.data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.start();
        cluster
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        self.command(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .output()
            .unwrap()
    }

    pub fn start(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off",
            self.port
        );
        let log = self.log.to_str().unwrap();
        let out = self.pg_ctl(&["start", "-w", "-t", "60", "-l", log, "-o", &options]);
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    pub fn stop_fast(&self) {
        let out = self.pg_ctl(&["stop", "-w", "-m", "fast"]);
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// The URL of another database on this cluster.
    pub fn database_url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-w", "-m", "immediate"]);
    }
}
