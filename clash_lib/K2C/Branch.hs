{-# LANGUAGE DataKinds, NoImplicitPrelude #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
Fork and join in one combinator: the same beat goes into two branches, and
their results come out paired. A residual block reads

> conv2d_0 p b |> branches (conv2d_1 p b |> conv2d_2 p b |> fifo d3) (fifo d20) |> add_0

where @add_0@ is a 'K2C.Stream.mapS' of the element-wise merge ("K2C.Merge").

= Hardware

No registers and no storage: a few AND gates. The buffering lives in the
branches (a 'K2C.Fifo.fifo' at the end of each).

= Protocol and exact timing (all combinational)

* Fork: branch 1's head sees the input beat as valid when the input is valid
  and branch 2's head is ready, and vice versa; ready upstream is
  @ready1 && ready2@. So the beat moves into both branches in the same cycle,
  the first cycle in which both heads are ready, and never into one alone.
* Join: the output is valid when both tails are valid, and is the pair of
  their beats. Branch 1's tail sees downstream's ready AND branch 2's tail's
  valid, and vice versa. So both tails' beats move in the same cycle: when
  both are valid and downstream is ready.

No latency is added. Nesting composes: @branches s1 (branches s2 s3)@ is a
3-way fork and join with exactly the timing of a 3-input one (every head
takes the beat in the first cycle all heads are ready; every tail moves in a
cycle where all tails are valid and downstream is ready).

= Precondition: every branch ends in a @fifo@ (or another @branches@)

Each branch's tail must be a 'K2C.Fifo.fifo' or a 'branches' whose own
branches obey this rule. Their output valid is registered state (or an AND
of registered valids), so the join's readies (downstream ready AND the other
tail's valid) do not depend on anything the same cycle's forward path
computes: the design stays free of combinational loops. Each head's ready
must, as for every block ("K2C.Stream"), not depend on its own input's
valid; then the fork's valids (input valid AND the other head's ready) are
loop free too. Without the fifo, e.g. @branches (mapS f) (mapS g)@, branch
1's ready would be downstream ready AND branch 2's valid, which is the
input's valid AND branch 1's ready: a loop.

Given the precondition and that every block's ready is independent of its
own input's valid, the combinator's ready (@ready1 && ready2@) is
independent of its input's valid, as the stream rule requires.

= Wiring: 'fork', 'joined', 'moves'

A network that is not series-parallel (a tensor read again past a merge, as in
DenseNet blocks; forks from several depths into one merge) is wired by name:

> (c0_reads, c0_out_ready) = fork c0_out (c1_ready :> cat_fifo_ready_0 :> Nil)
> (cat_fifo_0, cat_fifo_ready_0) = fifo d_cat_0 (c0_reads !! 1, cat_moves)
> (cat_fifo_1, cat_fifo_ready_1) = fifo d_cat_1 (c1_out, cat_moves)
> cat_in = joined cat_fifo_0 cat_fifo_1
> cat_moves = moves cat_in cat_ready
> (cat_out, cat_ready) = cat (cat_in, cat_out_ready)

'fork' has the fork's exact timing above for any number of readers (the beat
moves to every reader in the first cycle all are ready, never to some alone);
'joined' and 'moves' are the join's (every input of a merge ends in a FIFO,
whose beats move together when all are valid and the merge is ready). The
wiring has no combinational loop for the same reasons as 'branches': a ready
depends only on readies downstream and on FIFOs' registered valids (a join's
inputs), a valid only on valids upstream and on readies.
-}
module K2C.Branch
  ( branches
  , fork
  , joined
  , moves
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)

-- | Run two streams on the same beats and pair their results (see the module
-- header for the timing and the precondition on the branches' tails).
branches :: Stream dom a b -> Stream dom a c -> Stream dom a (b, c)
branches first second (input, readyOut) = (output, readyIn)
  where
    (out1, ready1) = first  (offer ready2, take1)
    (out2, ready2) = second (offer ready1, take2)

    -- Fork: a branch sees the beat only when the other head can take it too.
    offer otherReady = mux otherReady input (pure Nothing)
    readyIn = ready1 .&&. ready2

    -- Join: a tail moves only together with the other.
    valid1 = isJust <$> out1
    valid2 = isJust <$> out2
    take1  = readyOut .&&. valid2
    take2  = readyOut .&&. valid1
    output = mux (valid1 .&&. valid2) (pair <$> out1 <*> out2) (pure Nothing)

    pair x y = (,) <$> x <*> y

-- | Fork one stream to @n@ readers: reader @i@ sees the beat as valid when the
-- input is valid and every other reader is ready; the input's ready is the AND
-- of all readers' readies. So the beat moves to every reader in the same
-- cycle, the first in which all are ready (all combinational, as in
-- 'branches').
fork
  :: KnownNat n
  => Signal dom (Maybe a) -> Vec n (Signal dom Bool) -> (Vec n (Signal dom (Maybe a)), Signal dom Bool)
fork input readies = (imap offer readies, allReady <$> readiesNow)
  where
    readiesNow = bundle readies
    offer i _ = mux (allReady . replace i True <$> readiesNow) input (pure Nothing)
    -- one comparison of the packed readies, not a fold: Clash writes a fold over a
    -- vector as a chain through one vector signal, which Verilator reports as a
    -- combinational loop (UNOPTFLAT) although no bit depends on itself
    allReady rs = pack rs == maxBound

-- | The beats of two streams paired: valid when both are (each the output of a
-- FIFO, whose valid is registered). Nest it for more inputs:
-- @joined a (joined b c)@ has the type a merge of three reads.
joined :: Signal dom (Maybe a) -> Signal dom (Maybe b) -> Signal dom (Maybe (a, b))
joined = liftA2 (\x y -> (,) <$> x <*> y)

-- | Whether the joined beat moves this cycle: the ready every FIFO of the join
-- gets, so all its FIFOs' beats move together.
moves :: Signal dom (Maybe a) -> Signal dom Bool -> Signal dom Bool
moves beats ready = ready .&&. (isJust <$> beats)
