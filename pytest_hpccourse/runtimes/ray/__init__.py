"""Ray runtimes: drills on Ray actors (`drills`: run_ranks, run_actors, drill_once, remote, the `ray_cluster`
fixture), the torch.distributed call recorder (`collectives`) and the Ray instance `hpccourse check` shares
between its pytest runs (`shared`)."""
