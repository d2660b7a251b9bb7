python3 - <<'PY'
users = [l.split(":") for l in open("etc/passwd").read().splitlines()]
groups = [l.split(":") for l in open("etc/group").read().splitlines()]
out = []
for u in sorted((u for u in users if int(u[2]) >= 1000), key=lambda u: int(u[2])):
    gs = sorted({g[0] for g in groups if g[2] == u[3] or u[0] in g[3].split(",")})
    out.append(f"{u[0]}: {','.join(gs)}")
open("audit/groups.txt", "w").write("\n".join(out) + "\n")
PY
