"""Pick items for a 0/1 knapsack: choose(weights, values, capacity) -> indices to take."""


# EVOLVE-BLOCK-START
def choose(weights, values, capacity):
    order = sorted(range(len(weights)), key=lambda i: values[i] / weights[i], reverse=True)
    taken, load = [], 0
    for i in order:
        if load + weights[i] <= capacity:
            taken.append(i)
            load += weights[i]
    return taken


# EVOLVE-BLOCK-END
