-- Redis' clock in ms on the node that holds KEYS[1] (a keyed call: in a Redis Cluster it goes to the
-- key's slot, where a keyless TIME could not be pipelined).
-- KEYS: any key of the slot whose node's clock is wanted
return now_ms()
