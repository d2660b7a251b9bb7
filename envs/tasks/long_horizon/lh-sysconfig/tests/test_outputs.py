import hashlib
import os
import pathlib
import stat

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
SHADOW_SHA = "c35b39f7ef422c4a1932eea830810c625e90f6b8caf61c88fd0015275fc831aa"
KEY_SHA = "3ade56b9d016574abad22206183cc40dfa4dea812c217bd51efe52e4c9bad4fe"

PASSWD = """root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
alice:x:1000:1000:Alice:/home/alice:/bin/bash
bob:x:1001:1001:Bob:/home/bob:/bin/zsh
legacy:x:1002:1002:Legacy service:/home/legacy:/usr/sbin/nologin
carol:x:1004:1004:Carol:/home/carol:/bin/bash
deploy:x:1050:1050:Deploy:/home/deploy:/bin/bash
"""
GROUP = """root:x:0:
daemon:x:1:
www-data:x:33:
sudo:x:27:alice
docker:x:999:alice,deploy
alice:x:1000:
bob:x:1001:
legacy:x:1002:
carol:x:1004:
devs:x:2000:alice,bob
ops:x:2001:
deploy:x:1050:
"""
HOSTS = """127.0.0.1 localhost
10.0.0.6 cache.internal cache
10.0.0.5 db.internal db
"""
APP = """# application settings
[server]
host = 0.0.0.0
port = 8080
max_connections = 200

[logging]
level = warn
file = /var/log/app.log

[client]
max_connections = 10
"""


def read(p):
    return (WS / p).read_text()


def mode(p):
    return stat.S_IMODE((WS / p).stat().st_mode)


def test_untouched():
    assert hashlib.sha256((WS / "etc/shadow").read_bytes()).hexdigest() == SHADOW_SHA
    assert hashlib.sha256((WS / "keys/deploy.pub").read_bytes()).hexdigest() == KEY_SHA
    assert sorted(p.name for p in WS.iterdir()) == ["audit", "etc", "home", "keys"]
    assert sorted(p.name for p in (WS / "etc").iterdir()) == ["app.conf", "cron.d", "group", "hosts", "passwd", "shadow", "sudoers.d"]


def test_passwd_group():
    assert read("etc/passwd") == PASSWD
    assert read("etc/group") == GROUP


def test_hosts_and_app_conf():
    assert read("etc/hosts") == HOSTS
    assert read("etc/app.conf") == APP


def test_cron_and_sudoers():
    assert read("etc/cron.d/backup") == "30 2 * * * deploy /usr/local/bin/backup.sh\n"
    assert mode("etc/cron.d/backup") == 0o644
    assert os.listdir(WS / "etc/cron.d") == ["backup"]
    assert read("etc/sudoers.d/deploy") == "deploy ALL=(root) NOPASSWD: /usr/bin/systemctl restart app\n"
    assert mode("etc/sudoers.d/deploy") == 0o440
    assert os.listdir(WS / "etc/sudoers.d") == ["deploy"]


def test_ssh():
    assert read("home/deploy/.ssh/authorized_keys") == read("keys/deploy.pub")
    assert mode("home/deploy") == 0o750
    assert mode("home/deploy/.ssh") == 0o700
    assert mode("home/deploy/.ssh/authorized_keys") == 0o600


def test_audit():
    assert read("audit/users.txt") == "alice:1000:/bin/bash\nbob:1001:/bin/zsh\nlegacy:1002:/usr/sbin/nologin\ncarol:1004:/bin/bash\ndeploy:1050:/bin/bash\n"
    assert read("audit/groups.txt").splitlines() == [
        "alice: alice,devs,docker,sudo",
        "bob: bob,devs",
        "legacy: legacy",
        "carol: carol",
        "deploy: deploy,docker",
    ]
