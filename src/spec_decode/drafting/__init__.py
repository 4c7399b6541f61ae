"""What proposes tokens and how many: model drafters (chains and trees), prompt lookup, and the
k policies, all deciding from the past only so that exactness never depends on them."""
