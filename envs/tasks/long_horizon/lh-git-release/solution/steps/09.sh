git -C repo branch -d feature/old
