git -C repo config user.name "Bisect Bot"
git -C repo config user.email bisect@example.com
