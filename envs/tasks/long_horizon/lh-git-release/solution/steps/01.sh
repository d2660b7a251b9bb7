git -C repo config user.name "Release Bot"
git -C repo config user.email release@example.com
