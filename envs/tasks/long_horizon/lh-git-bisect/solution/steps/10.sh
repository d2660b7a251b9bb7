git -C repo tag v1.0.2 main
