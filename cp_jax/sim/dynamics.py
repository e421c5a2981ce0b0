"""Classic kinematic bicycle model, the discrete action grid, and its inverse.

Forward model (reference point at the centre of the box, wheelbase L = frac * length):
    v1   = clip(v0 + a dt, -v_rev, v_max)            v_rev = 0: no reverse gear, braking stops the car
    vm   = (v0 + v1) / 2
    beta = atan(tan(delta) / 2)                       slip angle at the centre
    yaw1 = yaw0 + vm cos(beta) tan(delta) / L * dt
    xy1  = xy0 + vm dt (cos(yaw0 + beta), sin(yaw0 + beta))
The inverse recovers (a, delta) in closed form from two consecutive poses and speeds.

Actuator (between the action and the bicycle; `actuate` / `inverse_actuate`): commands are
targets that the car follows with a first-order lag, and the steering command is scaled down at
speed so that full lock gives at most `max_lat_accel`:
    a1   = a0 + lag (a_cmd - a0)                       actual acceleration
    u1   = u0 + lag (u_cmd - u0)                       steering position, in command units
    delta = u1 * min(1, atan(max_lat_accel L / v0^2) / steer_max)
With lag 1 and max_lat_accel inf this is the classic bicycle driven directly by the command.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def wrap_angle(x: jax.Array) -> jax.Array:
    """Wrap to (-pi, pi]."""
    return jnp.arctan2(jnp.sin(x), jnp.cos(x))


def decode_discrete(action: jax.Array, accel_grid: jax.Array, steer_grid: jax.Array):
    """Index [...] in [0, n_accel * n_steer) -> (accel [...], steer [...]); index = i_a * n_s + i_s."""
    n_steer = steer_grid.shape[0]
    return accel_grid[action // n_steer], steer_grid[action % n_steer]


def encode_discrete(accel, steer, accel_grid, steer_grid) -> jax.Array:
    """Nearest grid index [...] of continuous (accel, steer) [...]."""
    i_a = jnp.argmin(jnp.abs(accel[..., None] - accel_grid), -1)
    i_s = jnp.argmin(jnp.abs(steer[..., None] - steer_grid), -1)
    return (i_a * steer_grid.shape[0] + i_s).astype(jnp.int32)


def bicycle_step(xy, yaw, speed, accel, steer, length, wheelbase_frac, max_speed, max_reverse, dt):
    """One step of the bicycle. All per-agent arrays [A] (xy [A, 2]). Returns (xy, yaw, speed)."""
    v1 = jnp.clip(speed + accel * dt, -max_reverse, max_speed)
    vm = 0.5 * (speed + v1)
    tan_d = jnp.tan(steer)
    beta = jnp.arctan(0.5 * tan_d)
    wheelbase = jnp.maximum(wheelbase_frac * length, 0.5)
    yaw1 = wrap_angle(yaw + vm * jnp.cos(beta) * tan_d / wheelbase * dt)
    heading = yaw + beta
    xy1 = xy + (vm * dt)[:, None] * jnp.stack([jnp.cos(heading), jnp.sin(heading)], -1)
    return xy1, yaw1, v1


def settle(accel, speed0, speed1, dt):
    """The actuator's acceleration [A] after the speed limits: where the bicycle clipped the speed
    (top speed, or a stop when max_reverse is 0) the car accelerated only (speed1 - speed0) / dt.
    Without this a car braked to a stop would keep a negative actuator state (and, with a reverse
    gear, roll backwards until the lag decays)."""
    clipped = jnp.abs(speed0 + accel * dt - speed1) > 1e-6
    return jnp.where(clipped, (speed1 - speed0) / dt, accel)


def steer_scale(speed, length, wheelbase_frac, max_lat_accel, steer_max):
    """Factor [A] in (0, 1] from steering command units to road-wheel angle at this speed."""
    wheelbase = jnp.maximum(wheelbase_frac * length, 0.5)
    limit = jnp.arctan(max_lat_accel * wheelbase / jnp.maximum(speed * speed, 1e-6))
    return jnp.minimum(1.0, limit / steer_max)


def actuate(accel_cmd, steer_cmd, accel0, steer0, speed, length, wheelbase_frac, lag, max_lat_accel, steer_max):
    """Commands -> (accel [A], steer position [A] in command units, road-wheel angle [A] rad).

    accel0 / steer0 are the previous step's actual acceleration and steering position.
    """
    accel = accel0 + lag * (accel_cmd - accel0)
    steer = steer0 + lag * (steer_cmd - steer0)
    delta = steer * steer_scale(speed, length, wheelbase_frac, max_lat_accel, steer_max)
    return accel, steer, delta


def inverse_actuate(accel, delta, accel0, steer0, speed, length, wheelbase_frac, lag, max_lat_accel, steer_max):
    """Commands (accel_cmd, steer_cmd) [...] that make `actuate` produce (accel, delta) from the
    previous (accel0, steer0) at this speed (unclipped: they may lie outside the action grid)."""
    steer = delta / steer_scale(speed, length, wheelbase_frac, max_lat_accel, steer_max)
    return accel0 + (accel - accel0) / lag, steer0 + (steer - steer0) / lag


def inverse_bicycle(yaw0, speed0, yaw1, speed1, length, wheelbase_frac, dt, max_steer=1.0):
    """Actions (accel, steer) [...] that take (yaw0, speed0) to (yaw1, speed1) in one step.

    Closed form: with k = dyaw L / (vm dt), tan(delta) = k / sqrt(1 - k^2 / 4). Near-zero speed
    gives steer 0. Steer is clipped to +-max_steer.
    """
    accel = (speed1 - speed0) / dt
    vm = 0.5 * (speed0 + speed1)
    wheelbase = jnp.maximum(wheelbase_frac * length, 0.5)
    moving = jnp.abs(vm) > 0.05
    k = wrap_angle(yaw1 - yaw0) * wheelbase / jnp.where(moving, vm * dt, 1.0)
    k = jnp.clip(k, -1.99, 1.99)
    tan_d = k / jnp.sqrt(1.0 - 0.25 * k * k)
    steer = jnp.where(moving, jnp.clip(jnp.arctan(tan_d), -max_steer, max_steer), 0.0)
    return accel, steer


def log_speed(log_vel: jax.Array, log_yaw: jax.Array) -> jax.Array:
    """Signed speed [...] along the heading from logged velocity [..., 2] and yaw [...]."""
    return log_vel[..., 0] * jnp.cos(log_yaw) + log_vel[..., 1] * jnp.sin(log_yaw)


def inverse_log(log_yaw, log_vel, log_valid, size, wheelbase_frac, dt):
    """Expert actions from a log: yaw [A, T], vel [A, T, 2], valid [A, T], size [A, 2].

    Returns (accel [A, T-1], steer [A, T-1], valid [A, T-1]) for transitions t -> t+1.
    """
    v = log_speed(log_vel, log_yaw)
    length = size[:, :1]
    accel, steer = inverse_bicycle(
        log_yaw[:, :-1], v[:, :-1], log_yaw[:, 1:], v[:, 1:], length, wheelbase_frac, dt
    )
    valid = log_valid[:, :-1] & log_valid[:, 1:]
    return jnp.where(valid, accel, 0.0), jnp.where(valid, steer, 0.0), valid
