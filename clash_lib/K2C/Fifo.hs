{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, TypeFamilies, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
A first-in first-out buffer of @depth@ beats, @depth >= 1@ (any value, not
only powers of two). It decouples the two sides of a stream: in a residual
block ("K2C.Branch") the short branch is a 'fifo' that holds the beats the
long branch has not finished yet, and every branch ends in one so that the
join sees registered valids.

= Hardware

* storage: @depth * BitSize a@ bits in an 'asyncRam' (LUT RAM: written at
  the clock edge, read combinationally), no reset; written at the write
  pointer whenever there is room, so its write enable is the ready flag;
* registers (reset to 0): the count, @Index (depth + 1)@, and the read and
  write pointers, @Index depth@ each, which wrap from @depth - 1@ to 0; four
  flags, @count < depth@ (ready), @count > 0@ (valid), @count = depth - 1@ and
  @count = 1@, each the next count's value chosen by the handshakes.

= Protocol and exact timing

With @count(t)@ the count at the start of cycle @t@ (0 after reset):

* input ready in cycle @t@ = @count(t) < depth@. Registered state only: it
  depends neither on the input's valid nor on downstream's ready.
* output valid in cycle @t@ = @count(t) > 0@; the output is the oldest beat
  held (the RAM read combinationally at the read pointer). Also registered
  state only.
* a beat accepted (valid and ready) in cycle @t@ is counted from cycle
  @t + 1@; a beat that moves out (output valid and downstream ready) in cycle
  @t@ is gone from cycle @t + 1@; both in one cycle leave the count unchanged.

Consequences: beat @k@, accepted in cycle @q_k@, is at the output from cycle
@max(q_k + 1, m_(k-1) + 1)@, @m_(k-1)@ being the cycle beat @k - 1@ moved
out. There is no path from input to output in the same cycle (latency at
least one cycle), none from downstream's ready to the input's ready, and
with @depth >= 2@ the buffer sustains one beat per cycle in and out. With
@depth = 1@ it is a single register: one beat every two cycles.
-}
module K2C.Fifo
  ( fifo
  , blockFifo
  , nextCount
  ) where

import Clash.Prelude
import Data.Maybe (isJust)

import K2C.Stream (Stream)
import K2C.Window (nextIndex)

-- | A FIFO of @depth@ beats (see the module header).
fifo
  :: forall dom depth a
   . (HiddenClockResetEnable dom, KnownNat depth, 1 <= depth, NFDataX a)
  => SNat depth -> Stream dom a a
fifo SNat (input, readyOut) = (output, readyIn)
  where
    count    = register (0 :: Index (depth + 1)) countNext
    countNext = nextCount <$> count <*> accepted <*> removed
    readPtr  = register (0 :: Index depth) (mux removed (nextIndex <$> readPtr) readPtr)
    writePtr = register (0 :: Index depth) (mux accepted (nextIndex <$> writePtr) writePtr)

    -- count < depth and count > 0, each a flip-flop of its own (the same value in every
    -- cycle as a comparison of the count): what the neighbours' handshakes and clock
    -- enables see starts at a flip-flop, not after the count's comparator (a window
    -- generator after a FIFO of pixels loads its 2,304-bit window under an enable one LUT
    -- from these; the thesis CNN on ECP5). Their next values, and those of two more flags
    -- (count = depth - 1, count = 1), are chosen by this cycle's accepted and removed
    -- among comparisons of the count register: the handshakes, which come from the
    -- neighbours (often far away), meet one LUT before each flag, not the count's
    -- increment, multiplexer and comparator (mlp_tanh on ECP5: the output FIFO's ready ->
    -- 3.7 + 2.2 ns of route through them -> the softmax queue's ready, 10.3 ns).
    readyIn  = register True  (step <$> accepted <*> removed <*> readyIn <*> (not <$> nearFull) <*> pure True)
    nearFull = register (natToNum @depth == (1 :: Integer))
                 (step <$> accepted <*> removed <*> nearFull <*> twoBelowFull <*> (not <$> readyIn))
    validOut = register False (step <$> accepted <*> removed <*> validOut <*> pure True <*> (not <$> single))
    single   = register False (step <$> accepted <*> removed <*> single <*> (not <$> validOut) <*> atTwo)
    -- count = depth - 2 (never, for depth = 1) and count = 2, on the count register
    twoBelowFull
      | natToNum @depth >= (2 :: Integer) = (== fromInteger (natToNum @depth - 2)) <$> count
      | otherwise                         = pure False
    atTwo = (\c -> (resize c :: Index (depth + 3)) == 2) <$> count
    accepted = readyIn .&&. (isJust <$> input)
    removed  = validOut .&&. readyOut

    -- The RAM is written in every cycle it has room (readyIn), at the write
    -- pointer: a free slot, which only an accepted beat makes part of the
    -- queue (the pointer moves on); otherwise the next write overwrites it.
    -- So the write enable of every LUT-RAM cell is a flip-flop, which
    -- place and route copies next to the cells, not a LUT after the input's
    -- valid (mlp_tanh on ECP5: a 384-bit queue's write enable, 9.0 ns of
    -- route after that LUT, 13.2 ns).
    write  = mux readyIn (Just <$> bundle (writePtr, fromJustX <$> input)) (pure Nothing)
    oldest = asyncRam (SNat @depth) readPtr write
    output = mux validOut (Just <$> oldest) (pure Nothing)

-- | A FIFO of @depth@ beats in block RAM (see the module header, "Block RAM").
blockFifo
  :: forall dom depth a
   . (HiddenClockResetEnable dom, KnownNat depth, 1 <= depth, NFDataX a)
  => SNat depth -> Stream dom a a
blockFifo SNat (input, readyOut) = (output, readyIn)
  where
    count     = register (0 :: Index (depth + 1)) countNext
    countNext = nextCount <$> count <*> accepted <*> removed
    readPtr   = register (0 :: Index depth) readNext
    readNext  = mux removed (nextIndex <$> readPtr) readPtr
    writePtr  = register (0 :: Index depth) (mux accepted (nextIndex <$> writePtr) writePtr)

    readyIn  = register True ((< maxBound) <$> countNext)
    validOut = register False (waiting <$> count <*> removed)
    accepted = readyIn .&&. (isJust <$> input)
    removed  = validOut .&&. readyOut

    write  = mux accepted (Just <$> bundle (writePtr, fromJustX <$> input)) (pure Nothing)
    oldest = blockRam (repeat @depth (deepErrorX "blockFifo: slot unwritten")) readNext write
    output = mux validOut (Just <$> oldest) (pure Nothing)

-- | Whether a beat held now stays after this cycle's handshake: the count less
-- the beat moving out, above zero.
waiting :: KnownNat n => Index n -> Bool -> Bool
waiting count removed = if removed then count > 1 else count > 0

-- | The count of the next cycle: one more for a beat in, one fewer for a beat
-- out. Never leaves its range where, as here and in the engine's and
-- "K2C.Pipe"'s credit counts, a beat comes in only below the maximum.
nextCount :: KnownNat n => Index n -> Bool -> Bool -> Index n
nextCount count accepted removed
  | accepted && not removed = count + 1
  | removed && not accepted = count - 1
  | otherwise               = count

-- | A flag on the count, next cycle: @whenUp@ (its value one count higher) when
-- the count grows by one (@up@ only), @whenDown@ (one count lower) when it
-- shrinks by one (@down@ only), otherwise its value now.
step :: Bool -> Bool -> Bool -> Bool -> Bool -> Bool
step up down now whenUp whenDown
  | up && not down = whenUp
  | down && not up = whenDown
  | otherwise      = now
