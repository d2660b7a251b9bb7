cd repo
echo 1.1.0 > VERSION
git commit -qam "Bump version to 1.1.0"
